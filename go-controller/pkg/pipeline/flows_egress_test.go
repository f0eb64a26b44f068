package pipeline

import (
	"net/netip"
	"testing"
)

// egressScenario is node-1 of the dual-stack cluster with three selected pods: web-1 by
// Egress 1 (held by node-2, reached over the IPv4 underlay), client-1 by Egress 2 (held by
// node-1 itself: 172.31.0.100 and fd00:172:31::100), db-1 by Egress 3 (no holder).
func egressScenario() scenario {
	sc := threeNodesDualStack(1)
	sc.name, sc.title = "three-nodes-dual-stack-node-1-egress", "three nodes, dual-stack: node-1 with Egress IPs"
	sc.pods = append(sc.pods, dualStackPod(1, 12, "db-1"))
	both := []bool{false, true}
	sc.egress = &EgressState{
		Exclude: []netip.Prefix{cidr("172.31.0.1/32"), cidr("172.31.0.2/32"), cidr("172.31.0.3/32"), cidr("fd00:172:31::1/128"),
			cidr("fd00:172:31::2/128"), cidr("fd00:172:31::3/128"), cidr("192.168.0.0/16")},
		Pods: []EgressPod{
			{OFPort: sc.pods[0].OFPort, Families: both, ID: 1, HolderIP: underlayIP(2, false), HolderMAC: gwMAC(2)},
			{OFPort: sc.pods[1].OFPort, Families: both, ID: 2, Local: true},
			{OFPort: sc.pods[2].OFPort, Families: []bool{false}, ID: 3},
		},
		Held:  []HeldEgress{{ID: 2, IPs: []netip.Addr{ip("172.31.0.100"), ip("fd00:172:31::100")}}},
		Peers: []netip.Addr{underlayIP(2, false), underlayIP(3, true)},
	}
	return sc
}

func TestEgressRoutes(t *testing.T) {
	sc := egressScenario()
	tr := sc.tracer(t)
	web, client, db := sc.pods[0], sc.pods[1], sc.pods[2]
	internet := ip("8.8.8.8")

	// web-1's Egress is held by node-2: into the tunnel with the Egress's key.
	out := wantDelivered(t, trace(t, tr, fromPod(t, web, sc.node, internet), CTNew), tunnelPort)
	wantAddr(t, "tun_dst", out.TunDst, underlayIP(2, false))
	if out.TunID != EgressTunnelIDBase+1 {
		t.Errorf("tun_id %#x, want %#x", out.TunID, EgressTunnelIDBase+1)
	}
	// ... but node addresses and routed networks keep the ordinary route, untranslated.
	for _, dst := range []netip.Addr{ip("172.31.0.3"), ip("192.168.7.7")} {
		r := trace(t, tr, fromPod(t, web, sc.node, dst), CTNew)
		if got := wantDelivered(t, r, gatewayPort); got.IPSrc != podIP(t, web, false) {
			t.Errorf("web-1 -> %s: want the gateway with its own address, got:\n%s", dst, r)
		}
	}
	// client-1's Egress is held here: to the gateway, translated to the egress IP, both families.
	for _, dst := range []netip.Addr{internet, ip("2001:db8::1")} {
		r := trace(t, tr, fromPod(t, client, sc.node, dst), CTNew)
		got := wantDelivered(t, r, gatewayPort)
		want := ip("172.31.0.100")
		if dst.Is6() {
			want = ip("fd00:172:31::100")
		}
		if got.IPSrc != want || len(r.Commits) != 1 {
			t.Errorf("client-1 -> %s: want a commit translating to %s, got:\n%s", dst, want, r)
		}
	}
	// db-1's Egress has no holder: dropped, never masqueraded to the node (IPv4); its IPv6
	// has no egress IP and goes out as usual.
	wantDropped(t, trace(t, tr, fromPod(t, db, sc.node, internet), CTNew), L3Forwarding)
	wantDelivered(t, trace(t, tr, fromPod(t, db, sc.node, ip("2001:db8::1")), CTNew), gatewayPort)

	// From node-2, traffic of a pod Egress 2 selects: translated and off to the gateway.
	remote := fromTunnel(tcpPacket(tunnelPort, gwMAC(2), sc.node.GatewayMAC, ip("10.244.2.10"), internet), underlayIP(2, false))
	remote.TunID = EgressTunnelIDBase + 2
	r := trace(t, tr, remote, CTNew)
	if got := wantDelivered(t, r, gatewayPort); got.IPSrc != ip("172.31.0.100") || len(r.Commits) != 1 {
		t.Errorf("node-2's Egress 2 traffic: want translated to 172.31.0.100, got:\n%s", r)
	}
	// ... never to a cluster address, never with a key this node does not hold, never
	// from an unknown node.
	toPod := remote
	toPod.IPDst = ip("10.244.3.10")
	wantDropped(t, trace(t, tr, toPod, CTNew), L3Forwarding)
	other := remote
	other.TunID = EgressTunnelIDBase + 1
	wantDropped(t, trace(t, tr, other, CTNew), Classifier)
	stranger := remote
	stranger.TunSrc = ip("172.31.0.99")
	wantDropped(t, trace(t, tr, stranger, CTNew), Classifier)
	// ... and never with an inner source that is not one of node-2's pods (node-3's pod, a
	// local pod, an outside address).
	for _, src := range []netip.Addr{ip("10.244.3.10"), podIP(t, web, false), ip("192.0.2.7")} {
		forged := remote
		forged.IPSrc = src
		wantDropped(t, trace(t, tr, forged, CTNew), Classifier)
	}

	// The replies to web-1's Egress traffic come back from its holder, node-2, un-NATed to
	// web-1 but still from outside the cluster: admitted from node-2 only.
	reply := fromTunnel(tcpPacket(tunnelPort, gwMAC(2), sc.node.GatewayMAC, internet, podIP(t, web, false)), underlayIP(2, false))
	reply.TunID = TunnelVNI
	wantDelivered(t, trace(t, tr, reply, CTTracked|CTEstablished|CTReply), web.OFPort)
	notHolder := fromTunnel(tcpPacket(tunnelPort, gwMAC(3), sc.node.GatewayMAC, internet, podIP(t, web, false)), underlayIP(3, true))
	notHolder.TunID = TunnelVNI
	wantDropped(t, trace(t, tr, notHolder, CTTracked|CTEstablished|CTReply), Classifier)
}
