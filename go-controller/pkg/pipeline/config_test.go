package pipeline

import (
	"net/netip"
	"strings"
	"testing"
)

func TestNodeConfigValidation(t *testing.T) {
	for _, tc := range []struct {
		name   string
		mutate func(*NodeConfig)
		want   string
	}{
		{"no name", func(n *NodeConfig) { n.Name = "" }, "node name is empty"},
		{"multicast gateway MAC", func(n *NodeConfig) { n.GatewayMAC = mac("01:00:5e:00:00:01") }, "gateway MAC"},
		{"pod subnet outside cluster", func(n *NodeConfig) { n.PodSubnets[0] = cidr("10.99.1.0/24") }, "outside the cluster CIDRs"},
		{"two IPv4 pod subnets", func(n *NodeConfig) { n.PodSubnets[1] = cidr("10.244.7.0/24") }, "one per family"},
		{"pod subnet not a network", func(n *NodeConfig) { n.PodSubnets[0] = cidr("10.244.1.1/24") }, "not a network prefix"},
		{"gateway outside its subnet", func(n *NodeConfig) { n.GatewayIPs[0] = ip("10.244.9.1") }, "gateway IPs"},
		{"missing IPv6 gateway", func(n *NodeConfig) { n.GatewayIPs = n.GatewayIPs[:1] }, "one per pod subnet"},
		{"same ofport twice", func(n *NodeConfig) { n.GatewayOFPort = n.TunnelOFPort }, "share ofport"},
		{"reserved ofport", func(n *NodeConfig) { n.TunnelOFPort = 0xfffffffe }, "tunnel ofport"},
		{"underlay inside the cluster", func(n *NodeConfig) { n.UnderlayIPs = []netip.Addr{ip("10.244.200.1")} }, "inside cluster CIDR"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			node := dualStackNode(1)
			tc.mutate(&node)
			_, err := NewBuilder(node, testRound)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error = %v, want one mentioning %q", err, tc.want)
			}
		})
	}
}

func TestPodAndPeerValidation(t *testing.T) {
	b, err := NewBuilder(dualStackNode(1), testRound)
	if err != nil {
		t.Fatal(err)
	}
	pod := func(mutate func(*PodPort)) PodPort {
		p := dualStackPod(1, 10, "web")
		mutate(&p)
		return p
	}
	for _, tc := range []struct {
		name string
		pod  PodPort
		want string
	}{
		{"gateway's ofport", pod(func(p *PodPort) { p.OFPort = gatewayPort }), "belongs to the tunnel or the gateway"},
		{"address on another node", pod(func(p *PodPort) { p.IPs[0] = ip("10.244.2.10") }), "outside the node's pod subnets"},
		{"the gateway's address", pod(func(p *PodPort) { p.IPs[1] = ip("fd00:10:244:1::1") }), "is the gateway's"},
		{"no address", pod(func(p *PodPort) { p.IPs = nil }), "one per family"},
		{"bad MAC", pod(func(p *PodPort) { p.MAC = p.MAC[:4] }), "MAC"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := b.PodFlows(tc.pod)
			if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "pod default/web") {
				t.Fatalf("error = %v, want one naming the pod and mentioning %q", err, tc.want)
			}
		})
	}
	peer := threeNodesDualStack(1).peers[0]
	peer.PodSubnets = []netip.Prefix{cidr("10.244.1.0/25")}
	if _, err := b.PeerFlows(peer); err == nil || !strings.Contains(err.Error(), "overlaps") {
		t.Errorf("peer overlapping the local subnet: error = %v", err)
	}
	v4only, err := NewBuilder(oneNodeTwoPods().node, testRound)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := v4only.PeerFlows(threeNodesDualStack(1).peers[0]); err == nil || !strings.Contains(err.Error(), "outside the cluster CIDRs") {
		t.Errorf("IPv6 peer subnet on an IPv4-only node: error = %v", err)
	}
}

// TestBuilderKeepsItsOwnConfig: the caller may reuse its slices after NewBuilder.
func TestBuilderKeepsItsOwnConfig(t *testing.T) {
	node := dualStackNode(1)
	b, err := NewBuilder(node, testRound)
	if err != nil {
		t.Fatal(err)
	}
	before := FormatByTable(b.GatewayFlows())
	node.GatewayMAC[5] = 0x99
	node.GatewayIPs[0] = ip("10.244.1.254")
	if after := FormatByTable(b.GatewayFlows()); after != before {
		t.Error("changing the caller's NodeConfig changed the builder's flows")
	}
}
