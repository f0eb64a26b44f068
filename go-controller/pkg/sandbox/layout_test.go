package sandbox

import (
	"strings"
	"testing"
)

func TestNewLayoutRejectsNamesThatBreakInterfaceNames(t *testing.T) {
	for _, bad := range []string{"", "Upper", "with-dash", "1starts", "waytoolongname1"} {
		if _, err := NewLayout(bad, "/tmp"); err == nil {
			t.Errorf("name %q accepted", bad)
		}
	}
	l, err := NewLayout("demo", "/run/x")
	if err != nil {
		t.Fatal(err)
	}
	if got := l.PodNetNS("node1", "0123456789abcdef"); got != "kovs-demo-node1-0123456789abc" {
		t.Errorf("pod netns %q", got)
	}
	if !strings.HasPrefix(l.PodNetNS("node1", "u"), l.NetNSPrefix()) || !strings.HasPrefix(l.UnderlayNetNS(), l.NetNSPrefix()) {
		t.Error("a namespace escapes the sandbox prefix, so down would miss it")
	}
}

func TestPlanNodesGivesEachNodeItsOwnAddressesPerFamily(t *testing.T) {
	l, _ := NewLayout("t", "/tmp")
	for _, tc := range []struct {
		family IPFamily
		want   []string
	}{
		{IPv4, []string{"172.30.0.3"}},
		{IPv6, []string{"fd00:172:30::3"}},
		{DualStack, []string{"172.30.0.3", "fd00:172:30::3"}},
	} {
		nodes := planNodes(l, 3, tc.family)
		n := nodes[2]
		if n.Name != "node3" || strings.Join(n.IPs, ",") != strings.Join(tc.want, ",") {
			t.Errorf("%s: node 3 planned as %+v, want IPs %v", tc.family, n, tc.want)
		}
		if nodes[0].MAC == nodes[1].MAC {
			t.Errorf("%s: two nodes share MAC %s", tc.family, nodes[0].MAC)
		}
	}
}

func TestStopOrderStopsEmulatorsFirstAndOVSLast(t *testing.T) {
	if !(stopRank("node1-emulator") < stopRank("kube-apiserver") && stopRank("kube-apiserver") < stopRank("node1-ovsdb-server")) {
		t.Fatal("stop order: emulators, then the control plane, then OVS")
	}
}
