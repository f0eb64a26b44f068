package agent

import (
	"net"
	"net/netip"
	"strings"
	"testing"

	"github.com/kovs-net/kovs/go-controller/pkg/pipeline"
)

func testPeer(name, underlay, subnet string) pipeline.TunnelPeer {
	return pipeline.TunnelPeer{NodeName: name, UnderlayIP: netip.MustParseAddr(underlay),
		PodSubnets: []netip.Prefix{netip.MustParsePrefix(subnet)}, GatewayMAC: net.HardwareAddr{0x0a, 0x58, 0x0a, 0xf4, 0x02, 0x01}}
}

// TestOneBadPeerDoesNotStopTheNodesFlows (issue 14): a Node whose record is unusable for
// this node (a block outside the cluster CIDRs, a block overlapping this node's) is left
// out and reported; the pods' flows and the other peers' routes still compile.
func TestOneBadPeerDoesNotStopTheNodesFlows(t *testing.T) {
	s := NewNodeState(1, nil)
	s.SetNode(testNodeConfig())
	s.SetPod("veth-a", testPod("a", 3, 10))
	s.SetPeers([]pipeline.TunnelPeer{
		testPeer("node-2", "172.31.0.2", "10.244.2.0/24"),
		testPeer("node-3", "172.31.0.3", "10.99.0.0/24"),  // outside 10.244.0.0/16
		testPeer("node-4", "172.31.0.4", "10.244.1.0/25"), // overlaps node-1's own block
	})
	flows, _, err := s.Flows()
	if err != nil {
		t.Fatalf("the node's flows do not compile with one bad peer: %v", err)
	}
	var route, pod bool
	for _, f := range flows {
		route = route || f.Table == pipeline.L3Forwarding && strings.Contains(f.Match.String(), "nw_dst=10.244.2.0/24")
		pod = pod || f.Cookie.Category() == pipeline.CategoryPod
	}
	if !route || !pod {
		t.Errorf("node-2's route compiled: %v, the pod's flows: %v", route, pod)
	}
	rejected := s.RejectedPeers()
	for _, name := range []string{"node-3", "node-4"} {
		if rejected[name] == "" {
			t.Errorf("peer %s is not reported unusable: %v", name, rejected)
		}
	}
	if _, ok := rejected["node-2"]; ok || len(s.Peers()) != 1 {
		t.Errorf("usable peers %v, rejected %v; want node-2 alone usable", s.Peers(), rejected)
	}
}
