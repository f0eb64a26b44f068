package addresses

import (
	"net/netip"
	"testing"

	"github.com/kovs-net/kovs/go-controller/pkg/controller/ipam"
)

func TestUsageCountsBlocksAndAddresses(t *testing.T) {
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
	for node, blocks := range map[string][]string{"n1": {"10.244.1.0/24", "fd00:10:244:1::/64"}, "n2": {"10.244.2.0/24", "fd00:10:244:2::/64"}} {
		var prefixes []netip.Prefix
		for _, b := range blocks {
			prefixes = append(prefixes, netip.MustParsePrefix(b))
		}
		if err := a.setNodeBlocks(node, prefixes); err != nil {
			t.Fatal(err)
		}
	}
	for i, node := range []string{"n1", "n1", "n2"} {
		if _, err := a.allocatePod("x/p"+string(rune('a'+i)), "uid", node); err != nil {
			t.Fatal(err)
		}
	}
	u := a.Usage()
	if len(u.Blocks) != 4 {
		t.Fatalf("blocks = %+v", u.Blocks)
	}
	want := map[string]uint64{"n1/IPv4": 2, "n1/IPv6": 2, "n2/IPv4": 1, "n2/IPv6": 1}
	for _, b := range u.Blocks {
		if got := b.Allocated; got != want[b.Node+"/"+b.Family.String()] {
			t.Errorf("%s %s: %d allocated", b.Node, b.Block, got)
		}
		if b.Family == ipam.IPv4 && b.Capacity != 253 {
			t.Errorf("%s: capacity %d, want 253", b.Block, b.Capacity)
		}
	}
	for _, c := range u.ClusterCIDRs {
		if c.Nodes != 2 || c.Allocated != 3 {
			t.Errorf("%s: %d nodes, %d addresses, want 2 and 3", c.CIDR, c.Nodes, c.Allocated)
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
	a.releasePod("x/pa")
	if got := a.Usage().ClusterCIDRs[0].Allocated; got != 2 {
		t.Errorf("allocated after a release = %d, want 2", got)
	}
}
