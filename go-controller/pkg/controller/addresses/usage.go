package addresses

import (
	"net/netip"
	"slices"
	"strings"

	"github.com/kovs-net/kovs/go-controller/pkg/controller/ipam"
)

// Usage is how full the address plan is, for metrics: per cluster CIDR how many node
// blocks are held out of how many the plan allows, and per node block how many pod
// addresses are held out of how many it has.
type Usage struct {
	ClusterCIDRs []ClusterCIDRUsage
	Blocks       []BlockUsage
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
	// Allocated counts the pod addresses held in this CIDR's blocks.
	Allocated uint64
}

// BlockUsage is one node block.
type BlockUsage struct {
	Node      string
	Family    ipam.Family
	Block     netip.Prefix
	Allocated uint64
	Capacity  uint64
}

// Usage reads the allocator's current usage (a consistent view per pool, not across
// pools).
func (a *Allocator) Usage() Usage {
	a.mu.Lock()
	nodes := make(map[string]*ipam.PodAddressPools, len(a.pools))
	for n, p := range a.pools {
		nodes[n] = p
	}
	a.mu.Unlock()
	var u Usage
	perCIDR := map[ipam.Family]*ClusterCIDRUsage{}
	for _, c := range a.cfg.ClusterCIDRs {
		cu := ClusterCIDRUsage{CIDR: c, Family: c.Family(), MaxNodes: c.Capacity()}
		if pool, err := ipam.NewAddressPool(netip.PrefixFrom(c.CIDR.Addr(), c.BlockBits), ipam.PoolOptions{}); err == nil {
			cu.AddressesPerBlock = pool.Usable()
		}
		u.ClusterCIDRs = append(u.ClusterCIDRs, cu)
	}
	for i := range u.ClusterCIDRs {
		perCIDR[u.ClusterCIDRs[i].Family] = &u.ClusterCIDRs[i]
	}
	for node, pools := range nodes {
		for _, pool := range pools.Pools() {
			b := BlockUsage{Node: node, Family: pool.Family(), Block: pool.Block(), Allocated: pool.InUse(), Capacity: pool.Usable()}
			u.Blocks = append(u.Blocks, b)
			if cu, ok := perCIDR[b.Family]; ok && cu.CIDR.CIDR.Contains(b.Block.Addr()) {
				cu.Nodes++
				cu.Allocated += b.Allocated
			}
		}
	}
	slices.SortFunc(u.Blocks, func(x, y BlockUsage) int {
		if c := strings.Compare(x.Node, y.Node); c != 0 {
			return c
		}
		return int(x.Family) - int(y.Family)
	})
	return u
}
