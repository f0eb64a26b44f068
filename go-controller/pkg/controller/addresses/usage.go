package addresses

import (
	"net/netip"

	"github.com/kovs-net/kovs/go-controller/pkg/controller/ipam"
)

// Usage is how full the address plan is, for metrics: per cluster CIDR how many node
// blocks are held out of how many the plan allows. (How full each node's block is, the
// node's kovs-agent reports: it hands out the pod addresses.)
type Usage struct {
	ClusterCIDRs []ClusterCIDRUsage
}

// ClusterCIDRUsage is one cluster CIDR's share of the plan.
type ClusterCIDRUsage struct {
	CIDR   ipam.ClusterCIDR
	Family ipam.Family
	// Nodes hold a block of this CIDR; MaxNodes is the node cap the CIDR and the block
	// size imply (2^(block bits - CIDR bits)).
	Nodes, MaxNodes uint64
	// AddressesPerBlock is how many pod addresses one node block has.
	AddressesPerBlock uint64
}

// Usage reads the allocator's current usage.
func (a *Allocator) Usage() Usage {
	var u Usage
	for _, c := range a.cfg.ClusterCIDRs {
		cu := ClusterCIDRUsage{CIDR: c, Family: c.Family(), MaxNodes: c.Capacity()}
		if pool, err := ipam.NewAddressPool(netip.PrefixFrom(c.CIDR.Addr(), c.BlockBits), ipam.PoolOptions{}); err == nil {
			cu.AddressesPerBlock = pool.Usable()
		}
		u.ClusterCIDRs = append(u.ClusterCIDRs, cu)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if !a.cfg.UseNodePodCIDRs && a.subnets != nil {
		// The pool's own count: a block counts until the pool has it back (a deleted
		// node's once it is released), not only while a Node is known to hold it.
		for _, sa := range a.subnets.Allocators() {
			for i := range u.ClusterCIDRs {
				if cu := &u.ClusterCIDRs[i]; cu.CIDR.CIDR == sa.ClusterCIDR().CIDR {
					cu.Nodes = sa.InUse()
				}
			}
		}
		return u
	}
	for _, blocks := range a.blocks {
		for _, b := range blocks {
			for i := range u.ClusterCIDRs {
				if cu := &u.ClusterCIDRs[i]; cu.CIDR.CIDR.Contains(b.Addr()) {
					cu.Nodes++
				}
			}
		}
	}
	return u
}
