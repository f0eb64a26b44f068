package ipam

import (
	"net/netip"
	"strings"
	"testing"
)

func TestPlanFamilyArithmetic(t *testing.T) {
	v4 := ClusterCIDR{CIDR: netip.MustParsePrefix("10.244.0.0/16"), BlockBits: 24}
	p := PlanFamily(v4, 110)
	if p.NodeCap != 256 || p.BlockPods != 253 || p.PodsPerNode != 110 || p.BoundBy != "max pods" || p.PodCapacity != 256*110 {
		t.Errorf("/16 in /24 with max pods 110: %+v", p)
	}
	p = PlanFamily(ClusterCIDR{CIDR: netip.MustParsePrefix("10.0.0.0/14"), BlockBits: 26}, 110)
	if p.NodeCap != 4096 || p.BlockPods != 61 || p.PodsPerNode != 61 || p.BoundBy != "block" || p.PodCapacity != 4096*61 {
		t.Errorf("/14 in /26: %+v", p)
	}
	p = PlanFamily(ClusterCIDR{CIDR: netip.MustParsePrefix("fd00:10:244::/48"), BlockBits: 64}, 0)
	if p.NodeCap != 65536 || p.BoundBy != "block" || !p.Saturated {
		t.Errorf("IPv6 /48 in /64 without max pods: %+v", p)
	}
	if p := PlanFamily(ClusterCIDR{CIDR: netip.MustParsePrefix("fd00:10:244::/48"), BlockBits: 64}, 250); p.PodCapacity != 65536*250 || p.Saturated {
		t.Errorf("IPv6 /48 in /64 with max pods 250: %+v", p)
	}
}

func TestCheckClusterCIDRsNamesBothRanges(t *testing.T) {
	cluster := []ClusterCIDR{{CIDR: netip.MustParsePrefix("10.96.0.0/12"), BlockBits: 24}}
	err := CheckClusterCIDRs(cluster, []Range{{Name: "Service CIDR kubernetes", Prefix: netip.MustParsePrefix("10.96.0.0/16")},
		{Name: "node node1", Prefix: netip.MustParsePrefix("172.30.0.1/32")}})
	if err == nil || !strings.Contains(err.Error(), "cluster CIDR 10.96.0.0/12 overlaps Service CIDR kubernetes 10.96.0.0/16") ||
		strings.Contains(err.Error(), "node1") {
		t.Errorf("error %v", err)
	}
	ok := []ClusterCIDR{{CIDR: netip.MustParsePrefix("10.244.0.0/16"), BlockBits: 24}}
	if err := CheckClusterCIDRs(ok, []Range{{Name: "Service CIDR kubernetes", Prefix: netip.MustParsePrefix("10.96.0.0/16")}}); err != nil {
		t.Errorf("disjoint plan refused: %v", err)
	}
	if err := CheckClusterCIDRs(ok, []Range{{Name: "node node3", Prefix: netip.MustParsePrefix("10.244.7.7/32")}}); err == nil ||
		!strings.Contains(err.Error(), "node node3 10.244.7.7/32") {
		t.Errorf("node inside the cluster CIDR: %v", err)
	}
}

func TestOversizedMaxPods(t *testing.T) {
	got := OversizedMaxPods(map[string]int{"a": 300, "b": 110},
		map[string][]netip.Prefix{"a": {netip.MustParsePrefix("10.244.0.0/24")}, "b": {netip.MustParsePrefix("10.244.1.0/24")}})
	if len(got) != 1 || !strings.HasPrefix(got[0], "a: max pods 300, block 10.244.0.0/24 holds 253") {
		t.Errorf("got %v", got)
	}
}
