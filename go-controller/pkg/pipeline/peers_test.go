package pipeline

import (
	"net/netip"
	"strings"
	"testing"
)

// TestUsablePeers: peers whose records clash (a shared underlay address, overlapping pod
// subnets) are both left out, with the reason; the others stay, in order.
func TestUsablePeers(t *testing.T) {
	n := threeNodesDualStack(1).node
	peer := func(name, underlay, v4, v6 string) TunnelPeer {
		return TunnelPeer{NodeName: name, UnderlayIP: ip(underlay), PodSubnets: []netip.Prefix{netip.MustParsePrefix(v4), netip.MustParsePrefix(v6)}, GatewayMAC: gwMAC(2)}
	}
	usable, rejected := UsablePeers(n, []TunnelPeer{
		peer("node-2", "172.31.0.2", "10.244.2.0/24", "fd00:10:244:2::/64"),
		peer("node-3", "172.31.0.3", "10.244.3.0/24", "fd00:10:244:3::/64"),
		peer("node-4", "172.31.0.3", "10.244.4.0/24", "fd00:10:244:4::/64"),   // node-3's underlay address
		peer("node-5", "172.31.0.5", "10.244.2.128/25", "fd00:10:244:5::/64"), // inside node-2's block
		peer("node-6", "172.31.0.6", "10.244.6.0/24", "fd00:10:244:6::/64"),
	})
	if len(usable) != 1 || usable[0].NodeName != "node-6" {
		t.Errorf("usable peers %v, want node-6 alone", usable)
	}
	for name, want := range map[string]string{"node-2": "overlaps", "node-3": "underlay address", "node-4": "underlay address", "node-5": "overlaps"} {
		if !strings.Contains(rejected[name], want) {
			t.Errorf("%s rejected for %q, want it to say %q", name, rejected[name], want)
		}
	}
}
