package ipam

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"sync"
)

// NodeSubnets allocates each node one block per configured family (one for a
// single-stack cluster, two for dual-stack), atomically: a node gets a block of
// every family or, on error, nothing new. It is safe for concurrent use.
type NodeSubnets struct {
	mu         sync.Mutex // serializes multi-family operations
	allocators []*SubnetAllocator
}

// NewNodeSubnets returns the node subnet allocation of a cluster with the given
// cluster CIDRs, at most one per family.
func NewNodeSubnets(cidrs []ClusterCIDR) (*NodeSubnets, error) {
	if err := validateClusterCIDRs(cidrs); err != nil {
		return nil, fmt.Errorf("invalid cluster CIDR plan: %w", err)
	}
	n := &NodeSubnets{}
	for _, c := range cidrs {
		a, err := NewSubnetAllocator(c)
		if err != nil {
			return nil, err
		}
		n.allocators = append(n.allocators, a)
	}
	slices.SortFunc(n.allocators, func(a, b *SubnetAllocator) int { return int(a.Family()) - int(b.Family()) })
	return n, nil
}

// Allocators returns the per-family allocators, IPv4 first.
func (n *NodeSubnets) Allocators() []*SubnetAllocator { return slices.Clone(n.allocators) }

// Allocator returns the allocator of family f, if that family is configured.
func (n *NodeSubnets) Allocator(f Family) (*SubnetAllocator, bool) {
	for _, a := range n.allocators {
		if a.Family() == f {
			return a, true
		}
	}
	return nil, false
}

// Allocate returns the node's blocks, IPv4 first, allocating those it lacks.
// If a family fails, the blocks this call handed out are released again and
// the error (wrapping a *SubnetExhaustedError) is returned; blocks the node
// held before the call are kept.
func (n *NodeSubnets) Allocate(node string) ([]netip.Prefix, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	blocks := make([]netip.Prefix, 0, len(n.allocators))
	var fresh []*SubnetAllocator
	for _, a := range n.allocators {
		block, isNew, err := a.allocate(node)
		if err != nil {
			for _, f := range fresh {
				f.Release(node)
			}
			return nil, fmt.Errorf("allocate %s block for node %q: %w", a.Family(), node, err)
		}
		if isNew {
			fresh = append(fresh, a)
		}
		blocks = append(blocks, block)
	}
	return blocks, nil
}

// Lookup returns the blocks the node holds, IPv4 first.
func (n *NodeSubnets) Lookup(node string) []netip.Prefix {
	n.mu.Lock()
	defer n.mu.Unlock()
	var blocks []netip.Prefix
	for _, a := range n.allocators {
		if b, ok := a.Lookup(node); ok {
			blocks = append(blocks, b)
		}
	}
	return blocks
}

// Release frees every block of the node and returns them, IPv4 first.
func (n *NodeSubnets) Release(node string) []netip.Prefix {
	n.mu.Lock()
	defer n.mu.Unlock()
	var blocks []netip.Prefix
	for _, a := range n.allocators {
		if b, ok := a.Release(node); ok {
			blocks = append(blocks, b)
		}
	}
	return blocks
}

// Restore records the node's blocks as read from its kovs.io/node-subnets
// annotation after a restart. Each valid block is recorded even if another is
// refused, so that a later Allocate only replaces what is wrong; the refusals
// are returned joined, each a *ConflictError.
func (n *NodeSubnets) Restore(node string, blocks []netip.Prefix) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	var errs []error
	for _, b := range blocks {
		a, ok := n.Allocator(FamilyOf(b.Addr()))
		if !ok {
			errs = append(errs, &ConflictError{Kind: "node block", Owner: node, Claim: b.String(), Reason: ConflictOutside,
				Detail: fmt.Sprintf("no %s cluster CIDR is configured", FamilyOf(b.Addr()))})
			continue
		}
		if err := a.Restore(node, b); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
