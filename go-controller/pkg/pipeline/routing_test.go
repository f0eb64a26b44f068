package pipeline

import (
	"fmt"
	"net/netip"
	"testing"
)

// cluster is the three-node dual-stack cluster, one tracer per node.
type cluster struct {
	nodes   map[int]scenario
	tracers map[int]*Tracer
}

func newCluster(t *testing.T) cluster {
	t.Helper()
	c := cluster{nodes: map[int]scenario{}, tracers: map[int]*Tracer{}}
	for n := 1; n <= 3; n++ {
		c.nodes[n] = threeNodesDualStack(n)
		c.tracers[n] = c.nodes[n].tracer(t)
	}
	return c
}

func (c cluster) pod(n, k int) PodPort { return c.nodes[n].pods[k] }

func TestPodToLocalPod(t *testing.T) {
	c := newCluster(t)
	web, client := c.pod(1, 0), c.pod(1, 1)
	for _, ipv6 := range []bool{false, true} {
		t.Run(fmt.Sprintf("ipv6=%t", ipv6), func(t *testing.T) {
			r := trace(t, c.tracers[1], fromPod(t, web, c.nodes[1].node, podIP(t, client, ipv6)), CTNew)
			out := wantDelivered(t, r, client.OFPort)
			wantMAC(t, "eth_src", out.EthSrc, gwMAC(1))
			wantMAC(t, "eth_dst", out.EthDst, client.MAC)
			wantAddr(t, "source (no NAT)", out.IPSrc, podIP(t, web, ipv6))
			if out.TTL != 63 {
				t.Errorf("TTL = %d, want 63 (one routing hop)", out.TTL)
			}
			if len(r.Commits) != 1 || r.Commits[0] != CTZone {
				t.Errorf("commits = %v, want the new connection committed to zone %d", r.Commits, CTZone)
			}
			tables := []string{"Classifier", "SpoofGuard", "ConntrackZone", "ConntrackState", "ServiceLB", "AdminEgressPolicy",
				"EgressPolicy", "BaselineEgressPolicy", "L3Forwarding", "L3DecTTL", "AdminIngressPolicy", "IngressPolicy",
				"BaselineIngressPolicy", "ConntrackCommit", "Output"}
			if ipv6 {
				tables = append(tables[:2], append([]string{"NDResponder", "NDReply"}, tables[2:]...)...)
			}
			wantTables(t, r, tables...)
		})
	}
}

// TestPodToRemotePod follows a packet from a pod of node-1 through the tunnel to a pod of
// node m: IPv4 and IPv6 inside, over the IPv4 underlay (node-2) and the IPv6 one (node-3).
func TestPodToRemotePod(t *testing.T) {
	c := newCluster(t)
	src := c.pod(1, 0)
	for _, m := range []int{2, 3} {
		for _, ipv6 := range []bool{false, true} {
			t.Run(fmt.Sprintf("node-%d/ipv6=%t", m, ipv6), func(t *testing.T) {
				dst := c.pod(m, 0)
				r := trace(t, c.tracers[1], fromPod(t, src, c.nodes[1].node, podIP(t, dst, ipv6)), CTNew)
				wire := wantDelivered(t, r, tunnelPort)
				wantAddr(t, "tunnel destination", wire.TunDst, underlayIP(m, tunnelFamily6(1, m)))
				if wire.TunID != TunnelVNI || wire.TTL != 63 {
					t.Errorf("tun_id %d ttl %d, want %d and 63", wire.TunID, wire.TTL, TunnelVNI)
				}
				wantMAC(t, "inner eth_src", wire.EthSrc, gwMAC(1))
				wantMAC(t, "inner eth_dst", wire.EthDst, gwMAC(m))

				in := fromTunnel(wire, underlayIP(1, tunnelFamily6(1, m)))
				out := wantDelivered(t, trace(t, c.tracers[m], in, CTNew), dst.OFPort)
				wantMAC(t, "eth_src", out.EthSrc, gwMAC(m))
				wantMAC(t, "eth_dst", out.EthDst, dst.MAC)
				wantAddr(t, "source (no NAT)", out.IPSrc, podIP(t, src, ipv6))
				if out.TTL != 62 {
					t.Errorf("TTL = %d, want 62 (each node's gateway routes once)", out.TTL)
				}
			})
		}
	}
}

func TestPodToNodeAddresses(t *testing.T) {
	c := newCluster(t)
	web, node := c.pod(1, 0), c.nodes[1].node
	for _, dst := range []string{"10.244.1.1", "172.31.0.1", "172.31.0.2", "1.1.1.1",
		"fd00:10:244:1::1", "fd00:172:31::1", "2001:db8::1"} {
		t.Run(dst, func(t *testing.T) {
			out := wantDelivered(t, trace(t, c.tracers[1], fromPod(t, web, node, ip(dst)), CTNew), gatewayPort)
			wantMAC(t, "eth_dst", out.EthDst, node.GatewayMAC)
			if out.TTL != 64 {
				t.Errorf("TTL = %d, want 64: the host routes from here", out.TTL)
			}
		})
	}
}

func TestPodToRemoteGatewayReachesThatHost(t *testing.T) {
	c := newCluster(t)
	wire := wantDelivered(t, trace(t, c.tracers[1], fromPod(t, c.pod(1, 0), c.nodes[1].node, ip("10.244.2.1")), CTNew), tunnelPort)
	r := trace(t, c.tracers[2], fromTunnel(wire, ip("172.31.0.1")), CTNew)
	wantMAC(t, "eth_dst", wantDelivered(t, r, gatewayPort).EthDst, gwMAC(2))
}

func TestNodeToPods(t *testing.T) {
	c := newCluster(t)
	node := c.nodes[1].node
	local, remote := c.pod(1, 0), c.pod(2, 0)
	for _, src := range []string{"10.244.1.1", "172.31.0.1", "fd00:10:244:1::1"} {
		t.Run(src, func(t *testing.T) {
			ipv6 := ip(src).Is6()
			p := tcpPacket(gatewayPort, node.GatewayMAC, local.MAC, ip(src), podIP(t, local, ipv6))
			out := wantDelivered(t, trace(t, c.tracers[1], p, CTNew), local.OFPort)
			if out.TTL != 64 {
				t.Errorf("local pod: TTL = %d, want 64 (the host already routed it)", out.TTL)
			}
			// The host resolved the remote pod to node-2's gateway MAC through the proxy ARP/ND.
			p = tcpPacket(gatewayPort, node.GatewayMAC, gwMAC(2), ip(src), podIP(t, remote, ipv6))
			wire := wantDelivered(t, trace(t, c.tracers[1], p, CTNew), tunnelPort)
			out = wantDelivered(t, trace(t, c.tracers[2], fromTunnel(wire, ip("172.31.0.1")), CTNew), remote.OFPort)
			if out.TTL != 63 {
				t.Errorf("remote pod: TTL = %d, want 63 (routed by node-2's gateway only)", out.TTL)
			}
		})
	}
}

func TestTunnelIngress(t *testing.T) {
	c := newCluster(t)
	web := c.pod(1, 0)
	fromNode2 := tcpPacket(tunnelPort, gwMAC(2), gwMAC(1), ip("10.244.2.10"), podIP(t, web, false))
	fromNode2.TunID, fromNode2.TunSrc = TunnelVNI, ip("172.31.0.2")

	wantDelivered(t, trace(t, c.tracers[1], fromNode2, CTNew), web.OFPort)

	stranger := fromNode2
	stranger.TunSrc = ip("172.31.0.99")
	wantDropped(t, trace(t, c.tracers[1], stranger, CTNew), Classifier)

	wrongKey := fromNode2
	wrongKey.TunID = 7
	wantDropped(t, trace(t, c.tracers[1], wrongKey, CTNew), Classifier)

	transit := fromNode2
	transit.IPDst = ip("10.244.3.10")
	wantDropped(t, trace(t, c.tracers[1], transit, CTNew), L3Forwarding)
}

// TestTunnelInnerSourceIsThePeers is a compromised node's attack (issue 14): packets from
// node 2's tunnel endpoint whose inner source is not node 2's (a pod of node 3, a local
// pod, an address outside the cluster) are dropped in the classifier; its pods, its
// gateway and its node address get through.
func TestTunnelInnerSourceIsThePeers(t *testing.T) {
	c := newCluster(t)
	web := c.pod(1, 0)
	from := func(src string) Packet {
		p := tcpPacket(tunnelPort, gwMAC(2), gwMAC(1), ip(src), podIP(t, web, ip(src).Is6()))
		p.TunID, p.TunSrc = TunnelVNI, ip("172.31.0.2")
		return p
	}
	for _, src := range []string{"10.244.2.10", "10.244.2.1", "172.31.0.2", "fd00:10:244:2::a"} {
		wantDelivered(t, trace(t, c.tracers[1], from(src), CTNew), web.OFPort)
	}
	for _, src := range []string{"10.244.3.10", "10.244.1.11", "10.9.9.9", "fd00:10:244:3::a", "172.31.0.3", "fe80::1"} {
		t.Run(src, func(t *testing.T) {
			wantDropped(t, trace(t, c.tracers[1], from(src), CTNew), Classifier)
		})
	}
}

func TestUnknownDestinationsDropped(t *testing.T) {
	c := newCluster(t)
	web, node := c.pod(1, 0), c.nodes[1].node
	for _, dst := range []string{"10.244.1.99", "10.244.9.10", "fd00:10:244:1::99", "fd00:10:244:9::a",
		"224.0.0.251", "255.255.255.255", "ff02::fb"} {
		t.Run(dst, func(t *testing.T) {
			wantDropped(t, trace(t, c.tracers[1], fromPod(t, web, node, ip(dst)), CTNew), L3Forwarding)
		})
	}
	// One node, no peers: another node's pod subnet is unknown.
	sc := oneNodeTwoPods()
	p := fromPod(t, sc.pods[0], sc.node, ip("10.244.2.10"))
	wantDropped(t, trace(t, sc.tracer(t), p, CTNew), L3Forwarding)
}

func TestConntrackStates(t *testing.T) {
	c := newCluster(t)
	web, client := c.pod(1, 0), c.pod(1, 1)
	p := fromPod(t, web, c.nodes[1].node, podIP(t, client, false))

	wantDropped(t, trace(t, c.tracers[1], p, CTInvalid), ConntrackState)

	for _, state := range []CTFlags{CTEstablished, CTRelated, CTEstablished | CTReply} {
		r := trace(t, c.tracers[1], p, state)
		wantDelivered(t, r, client.OFPort)
		wantTables(t, r, "Classifier", "SpoofGuard", "ConntrackZone", "ConntrackState",
			"L3Forwarding", "L3DecTTL", "AdminIngressPolicy", "IngressPolicy", "ConntrackCommit", "Output")
		if len(r.Commits) != 0 {
			t.Errorf("%s: committed again: %v", state, r.Commits)
		}
	}
}

func TestTTLExpiresWhenRouted(t *testing.T) {
	c := newCluster(t)
	p := fromPod(t, c.pod(1, 0), c.nodes[1].node, podIP(t, c.pod(1, 1), false))
	p.TTL = 1
	wantDropped(t, trace(t, c.tracers[1], p, CTNew), L3DecTTL)

	// Towards the host there is no routing in OVS, so TTL 1 still gets there.
	p.IPDst = netip.MustParseAddr("10.244.1.1")
	wantDelivered(t, trace(t, c.tracers[1], p, CTNew), gatewayPort)
}
