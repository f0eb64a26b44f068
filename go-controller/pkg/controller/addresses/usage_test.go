package addresses

import (
	"testing"

	"github.com/kovs-net/kovs/go-controller/pkg/controller/ipam"
)

func TestUsageCountsNodeBlocks(t *testing.T) {
	v4, err := ipam.ParseClusterCIDR("10.244.0.0/16", 24)
	if err != nil {
		t.Fatal(err)
	}
	v6, err := ipam.ParseClusterCIDR("fd00:10:244::/48", 64)
	if err != nil {
		t.Fatal(err)
	}
	a, err := NewAllocator(Config{ClusterCIDRs: []ipam.ClusterCIDR{v4, v6}})
	if err != nil {
		t.Fatal(err)
	}
	// As the node reconciler does: blocks from the pool, then recorded for the node.
	for _, node := range []string{"n1", "n2"} {
		blocks, err := a.subnets.Allocate(node)
		if err != nil {
			t.Fatal(err)
		}
		a.setNodeBlocks(node, blocks)
	}
	u := a.Usage()
	for _, c := range u.ClusterCIDRs {
		if c.Nodes != 2 {
			t.Errorf("%s: %d nodes, want 2", c.CIDR, c.Nodes)
		}
		switch c.Family {
		case ipam.IPv4:
			if c.MaxNodes != 256 || c.AddressesPerBlock != 253 {
				t.Errorf("IPv4 plan: %d nodes of %d addresses, want 256 of 253", c.MaxNodes, c.AddressesPerBlock)
			}
		case ipam.IPv6:
			if c.MaxNodes != 65536 {
				t.Errorf("IPv6 plan: %d nodes, want 65536", c.MaxNodes)
			}
		}
	}
	a.dropNode("n1")
	if got := a.Usage().ClusterCIDRs[0].Nodes; got != 1 {
		t.Errorf("nodes after one is deleted = %d, want 1 (its block back in the pool)", got)
	}
}
