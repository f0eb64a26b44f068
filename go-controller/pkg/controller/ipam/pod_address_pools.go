package ipam

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"sync"
)

// PodAddressPools hands out pod addresses from one node's blocks, one
// AddressPool per family, atomically: a pod gets an address of every family of
// the node or, on error, nothing new. It is safe for concurrent use.
type PodAddressPools struct {
	mu    sync.Mutex // serializes multi-family operations
	pools []*AddressPool
}

// NewPodAddressPools returns the pools of a node's blocks (from its
// kovs.io/node-subnets annotation), at most one per family.
func NewPodAddressPools(blocks []netip.Prefix, opts PoolOptions) (*PodAddressPools, error) {
	if len(blocks) == 0 {
		return nil, fmt.Errorf("node has no block")
	}
	p := &PodAddressPools{}
	for _, b := range blocks {
		if prev, ok := p.Pool(FamilyOf(b.Addr())); ok {
			return nil, fmt.Errorf("two %s node blocks (%s and %s): a node has one block per family", FamilyOf(b.Addr()), prev.Block(), b)
		}
		pool, err := NewAddressPool(b, opts)
		if err != nil {
			return nil, err
		}
		p.pools = append(p.pools, pool)
	}
	slices.SortFunc(p.pools, func(a, b *AddressPool) int { return int(a.Family()) - int(b.Family()) })
	return p, nil
}

// Pools returns the per-family pools, IPv4 first.
func (p *PodAddressPools) Pools() []*AddressPool { return slices.Clone(p.pools) }

// Pool returns the pool of family f, if the node has a block of that family.
func (p *PodAddressPools) Pool(f Family) (*AddressPool, bool) {
	for _, pool := range p.pools {
		if pool.Family() == f {
			return pool, true
		}
	}
	return nil, false
}

// Allocate returns the pod's addresses, IPv4 first, allocating those it lacks.
// If a family fails, the addresses this call handed out are released again
// (to the back of the line) and the error, wrapping an
// *AddressExhaustedError, is returned; addresses the pod held before are kept.
func (p *PodAddressPools) Allocate(podKey string) ([]PodAddress, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	addrs := make([]PodAddress, 0, len(p.pools))
	var fresh []*AddressPool
	for _, pool := range p.pools {
		a, isNew, err := pool.allocate(podKey)
		if err != nil {
			for _, f := range fresh {
				f.Release(podKey)
			}
			return nil, fmt.Errorf("allocate %s address for pod %q: %w", pool.Family(), podKey, err)
		}
		if isNew {
			fresh = append(fresh, pool)
		}
		addrs = append(addrs, a)
	}
	return addrs, nil
}

// Lookup returns the addresses the pod holds, IPv4 first.
func (p *PodAddressPools) Lookup(podKey string) []PodAddress {
	p.mu.Lock()
	defer p.mu.Unlock()
	var addrs []PodAddress
	for _, pool := range p.pools {
		if a, ok := pool.Lookup(podKey); ok {
			addrs = append(addrs, a)
		}
	}
	return addrs
}

// Release frees every address of the pod and returns them, IPv4 first.
func (p *PodAddressPools) Release(podKey string) []netip.Addr {
	p.mu.Lock()
	defer p.mu.Unlock()
	var ips []netip.Addr
	for _, pool := range p.pools {
		if ip, ok := pool.Release(podKey); ok {
			ips = append(ips, ip)
		}
	}
	return ips
}

// Restore records the pod's addresses as read from its kovs.io/pod-network
// annotation after a restart. Each valid address is recorded even if another
// is refused (the pod runs with them); the refusals are returned joined, each
// a *ConflictError.
func (p *PodAddressPools) Restore(podKey string, ips []netip.Addr) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	var errs []error
	for _, ip := range ips {
		pool, ok := p.Pool(FamilyOf(ip))
		if !ok {
			errs = append(errs, &ConflictError{Kind: "pod address", Owner: podKey, Claim: ip.String(), Reason: ConflictOutside,
				Detail: fmt.Sprintf("the node has no %s block", FamilyOf(ip))})
			continue
		}
		if err := pool.Restore(podKey, ip); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
