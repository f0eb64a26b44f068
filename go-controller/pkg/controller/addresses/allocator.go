// Package addresses is the address side of kovs-controller: it gives every Node its
// subnets (annotation kovs.io/node-subnets) and every Pod its addresses and MAC
// (annotation kovs.io/pod-network), from the pure allocators of package ipam. State is
// rebuilt from those annotations on start, never from local files.
package addresses

import (
	"fmt"
	"net/netip"
	"sync"

	"github.com/kovs-net/kovs/go-controller/pkg/controller/ipam"
)

// Config is the address plan.
type Config struct {
	// ClusterCIDRs with their node block sizes, at most one per family.
	ClusterCIDRs []ipam.ClusterCIDR
	// UseNodePodCIDRs takes node blocks from Node.spec.podCIDRs (kube-controller-manager
	// --allocate-node-cidrs) instead of allocating them.
	UseNodePodCIDRs bool
	// Pool options (quarantine of freed pod addresses).
	Pool ipam.PoolOptions
}

// Allocator holds the cluster's node blocks and, per node, its pod address pools.
type Allocator struct {
	cfg     Config
	subnets *ipam.NodeSubnets

	mu    sync.Mutex
	pools map[string]*ipam.PodAddressPools // by node name
	// owners maps a pod key (namespace/name) to the UID its addresses belong to.
	owners map[string]podOwner
	// highWater is what each Node records of its blocks' high water (highwater.go);
	// recordLocks serialize the writes of it, per node.
	highWater   map[string]ipam.HighWater
	recordLocks map[string]*sync.Mutex
}

type podOwner struct {
	uid  string
	node string
}

// NewAllocator validates the plan.
func NewAllocator(cfg Config) (*Allocator, error) {
	subnets, err := ipam.NewNodeSubnets(cfg.ClusterCIDRs)
	if err != nil {
		return nil, err
	}
	return &Allocator{cfg: cfg, subnets: subnets, pools: map[string]*ipam.PodAddressPools{}, owners: map[string]podOwner{},
		highWater: map[string]ipam.HighWater{}, recordLocks: map[string]*sync.Mutex{}}, nil
}

// setNodeBlocks makes the node's pod pools match its blocks. Pools are only created, or
// recreated when the blocks changed (which drops the node's pod allocations: the blocks
// of a node never change while it lives).
func (a *Allocator) setNodeBlocks(node string, blocks []netip.Prefix) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if p, ok := a.pools[node]; ok && sameBlocks(p, blocks) {
		return nil
	}
	pools, err := ipam.NewPodAddressPools(blocks, a.cfg.Pool)
	if err != nil {
		return fmt.Errorf("pod address pools of node %s: %w", node, err)
	}
	a.pools[node] = pools
	delete(a.highWater, node) // a record of other blocks
	return nil
}

func sameBlocks(p *ipam.PodAddressPools, blocks []netip.Prefix) bool {
	pools := p.Pools()
	if len(pools) != len(blocks) {
		return false
	}
	for i, pool := range pools {
		if pool.Block() != blocks[i] {
			return false
		}
	}
	return true
}

// dropNode forgets a deleted node's blocks and pools.
func (a *Allocator) dropNode(node string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	delete(a.pools, node)
	delete(a.highWater, node)
	delete(a.recordLocks, node)
	if !a.cfg.UseNodePodCIDRs {
		a.subnets.Release(node)
	}
}

func (a *Allocator) nodePools(node string) (*ipam.PodAddressPools, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	p, ok := a.pools[node]
	return p, ok
}

// allocatePod returns the pod's addresses on its node, allocating them if needed.
func (a *Allocator) allocatePod(key, uid, node string) ([]ipam.PodAddress, error) {
	pools, ok := a.nodePools(node)
	if !ok {
		return nil, errNodeNotReady{node}
	}
	addrs, err := pools.Allocate(podIPAMKey(key, uid))
	if err != nil {
		return nil, err
	}
	a.mu.Lock()
	a.owners[key] = podOwner{uid: uid, node: node}
	a.mu.Unlock()
	return addrs, nil
}

// restorePod records addresses a pod already holds (from its annotation).
func (a *Allocator) restorePod(key, uid, node string, ips []netip.Addr) error {
	pools, ok := a.nodePools(node)
	if !ok {
		return errNodeNotReady{node}
	}
	if err := pools.Restore(podIPAMKey(key, uid), ips); err != nil {
		return err
	}
	a.mu.Lock()
	a.owners[key] = podOwner{uid: uid, node: node}
	a.mu.Unlock()
	return nil
}

// releasePod frees whatever the pod key holds, whichever UID it was for.
func (a *Allocator) releasePod(key string) []netip.Addr {
	a.mu.Lock()
	owner, ok := a.owners[key]
	delete(a.owners, key)
	pools := a.pools[owner.node]
	a.mu.Unlock()
	if !ok || pools == nil {
		return nil
	}
	return pools.Release(podIPAMKey(key, owner.uid))
}

// ownerOf returns the UID whose addresses the pod key holds.
func (a *Allocator) ownerOf(key string) (string, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	o, ok := a.owners[key]
	return o.uid, ok
}

// podIPAMKey keys allocations by UID too, so a new pod reusing a name never inherits the
// old pod's address.
func podIPAMKey(key, uid string) string { return key + "/" + uid }

type errNodeNotReady struct{ node string }

func (e errNodeNotReady) Error() string { return fmt.Sprintf("node %s has no subnets yet", e.node) }
