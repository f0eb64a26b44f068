package pipeline

import (
	"net"
	"net/netip"
	"testing"
)

func TestSpoofedPacketsDropped(t *testing.T) {
	c := newCluster(t)
	web, other, node := c.pod(1, 0), c.pod(1, 1), c.nodes[1].node
	v4, v6 := podIP(t, web, false), podIP(t, web, true)
	dst4, dst6 := podIP(t, other, false), podIP(t, other, true)

	wrongMAC := fromPod(t, web, node, dst4)
	wrongMAC.EthSrc = other.MAC
	wrongIPv4 := tcpPacket(web.OFPort, web.MAC, node.GatewayMAC, ip("10.244.1.99"), dst4)
	wrongIPv6 := tcpPacket(web.OFPort, web.MAC, node.GatewayMAC, ip("fd00:10:244:1::99"), dst6)
	otherPodsIP := tcpPacket(web.OFPort, web.MAC, node.GatewayMAC, dst4, ip("10.244.1.1"))
	arpSpa := arpRequest(web.OFPort, web.MAC, dst4, ip("10.244.1.1"))
	arpSha := arpRequest(web.OFPort, web.MAC, v4, ip("10.244.1.1"))
	arpSha.ARPSha = other.MAC
	nsSLL := neighborSolicit(web.OFPort, web.MAC, v6, ip("fd00:10:244:1::1"))
	nsSLL.NDSLL = other.MAC
	naTarget := neighborAdvert(web.OFPort, web.MAC, node.GatewayMAC, v6, ip("fd00:10:244:1::1"), dst6)
	naTLL := neighborAdvert(web.OFPort, web.MAC, node.GatewayMAC, v6, ip("fd00:10:244:1::1"), v6)
	naTLL.NDTLL = other.MAC
	dad := neighborSolicit(web.OFPort, web.MAC, ip("::"), v6)
	dad.NDSLL, dad.NDOptionsType = noLinkLayer(), 0
	lldp := Packet{InPort: web.OFPort, EthSrc: web.MAC, EthDst: mac("01:80:c2:00:00:0e"), EthType: 0x88cc}
	unknownPort := fromPod(t, web, node, dst4)
	unknownPort.InPort = 99
	routerAdvert := neighborAdvert(web.OFPort, web.MAC, mac("33:33:00:00:00:01"), ip("fe80::858:aff:fef4:10a"), ip("ff02::1"), v6)
	routerAdvert.ICMPType, routerAdvert.NDTarget = ndRouterAdvert, ip("::")
	// Link-local sources (issue 14): only the pod's own (fe80::858:aff:fef4:10a, its
	// MAC's EUI-64), and no link-local packet is routed.
	otherLinkLocal := tcpPacket(web.OFPort, web.MAC, node.GatewayMAC, ip("fe80::bad"), dst6)
	otherLinkLocalNS := neighborSolicit(web.OFPort, web.MAC, ip("fe80::bad"), ip("fd00:10:244:1::1"))
	ownLinkLocal := tcpPacket(web.OFPort, web.MAC, node.GatewayMAC, LinkLocalAddress(web.MAC), dst6)
	toLinkLocal := tcpPacket(web.OFPort, web.MAC, node.GatewayMAC, v6, LinkLocalAddress(other.MAC))

	for _, tc := range []struct {
		name  string
		pkt   Packet
		where Table
	}{
		{"source MAC of another pod", wrongMAC, SpoofGuard},
		{"IPv4 source not its own", wrongIPv4, SpoofGuard},
		{"IPv6 source not its own", wrongIPv6, SpoofGuard},
		{"IPv4 source of another pod", otherPodsIP, SpoofGuard},
		{"ARP with another pod's sender IP", arpSpa, SpoofGuard},
		{"ARP with another sender MAC", arpSha, SpoofGuard},
		{"NS with another source link-layer address", nsSLL, SpoofGuard},
		{"NA for another pod's address", naTarget, SpoofGuard},
		{"NA with another target link-layer address", naTLL, SpoofGuard},
		{"DAD probe from ::", dad, SpoofGuard},
		{"non-IP ethertype", lldp, SpoofGuard},
		{"port no pod owns", unknownPort, Classifier},
		{"router advertisement from a pod", routerAdvert, NDResponder},
		{"another link-local source", otherLinkLocal, SpoofGuard},
		{"NS from another link-local source", otherLinkLocalNS, SpoofGuard},
		{"its own link-local source, routed", ownLinkLocal, L3Forwarding},
		{"to another pod's link-local address", toLinkLocal, L3Forwarding},
	} {
		t.Run(tc.name, func(t *testing.T) {
			wantDropped(t, trace(t, c.tracers[1], tc.pkt, CTNew), tc.where)
		})
	}
}

func TestARPForGatewayAnsweredInOVS(t *testing.T) {
	c := newCluster(t)
	web := c.pod(1, 0)
	gw := ip("10.244.1.1")
	r := trace(t, c.tracers[1], arpRequest(web.OFPort, web.MAC, podIP(t, web, false), gw), CTNew)
	reply := wantDelivered(t, r, web.OFPort)
	if reply.ARPOp != arpOpReply {
		t.Errorf("arp_op = %d, want reply", reply.ARPOp)
	}
	wantMAC(t, "eth_src", reply.EthSrc, gwMAC(1))
	wantMAC(t, "eth_dst", reply.EthDst, web.MAC)
	wantMAC(t, "arp_sha", reply.ARPSha, gwMAC(1))
	wantMAC(t, "arp_tha", reply.ARPTha, web.MAC)
	wantAddr(t, "arp_spa", reply.ARPSpa, gw)
	wantAddr(t, "arp_tpa", reply.ARPTpa, podIP(t, web, false))
	wantTables(t, r, "Classifier", "SpoofGuard", "ARPResponder")
}

func TestNDForGatewayAnsweredInOVS(t *testing.T) {
	c := newCluster(t)
	web := c.pod(1, 0)
	gw := ip("fd00:10:244:1::1")
	for _, src := range []string{"fd00:10:244:1::a", "fe80::858:aff:fef4:10a"} {
		t.Run(src, func(t *testing.T) {
			r := trace(t, c.tracers[1], neighborSolicit(web.OFPort, web.MAC, ip(src), gw), CTNew)
			na := wantDelivered(t, r, web.OFPort)
			if na.ICMPType != ndNeighborAdvert || na.NDOptionsType != ndOptionTargetLL || na.TTL != 255 {
				t.Errorf("type %d option %d hop limit %d, want an NA with a target link-layer option and hop limit 255",
					na.ICMPType, na.NDOptionsType, na.TTL)
			}
			if na.NDReserved != naRouter|naSolicited|naOverride {
				t.Errorf("flags = %#x, want router|solicited|override", na.NDReserved)
			}
			wantMAC(t, "eth_src", na.EthSrc, gwMAC(1))
			wantMAC(t, "eth_dst", na.EthDst, web.MAC)
			wantMAC(t, "nd_tll", na.NDTLL, gwMAC(1))
			wantAddr(t, "ipv6_src", na.IPSrc, gw)
			wantAddr(t, "ipv6_dst", na.IPDst, ip(src))
			wantAddr(t, "nd_target", na.NDTarget, gw)
		})
	}
	malformed := neighborSolicit(web.OFPort, web.MAC, podIP(t, web, true), gw)
	malformed.TTL = 64
	wantDropped(t, trace(t, c.tracers[1], malformed, CTNew), NDResponder)
}

// TestNeighborDelivery: ARP and ND not answered in OVS go to the owner of the address (a
// request) or of the MAC (a reply); nothing is flooded.
func TestNeighborDelivery(t *testing.T) {
	c := newCluster(t)
	web, client, node := c.pod(1, 0), c.pod(1, 1), c.nodes[1].node
	gw4, gw6 := ip("10.244.1.1"), ip("fd00:10:244:1::1")
	for _, tc := range []struct {
		name string
		pkt  Packet
		port uint32
	}{
		{"host ARPs for a local pod", arpRequest(gatewayPort, node.GatewayMAC, gw4, podIP(t, web, false)), web.OFPort},
		{"pod ARPs for a local pod", arpRequest(web.OFPort, web.MAC, podIP(t, web, false), podIP(t, client, false)), client.OFPort},
		{"pod answers the host's ARP", arpReplyFrom(web, podIP(t, web, false), node.GatewayMAC, gw4), gatewayPort},
		{"pod answers another pod's ARP", arpReplyFrom(web, podIP(t, web, false), client.MAC, podIP(t, client, false)), client.OFPort},
		{"host solicits a local pod", neighborSolicit(gatewayPort, node.GatewayMAC, gw6, podIP(t, web, true)), web.OFPort},
		{"pod solicits a local pod", neighborSolicit(web.OFPort, web.MAC, podIP(t, web, true), podIP(t, client, true)), client.OFPort},
		{"pod advertises to the host", neighborAdvert(web.OFPort, web.MAC, node.GatewayMAC, podIP(t, web, true), gw6, podIP(t, web, true)), gatewayPort},
		{"pod advertises to a pod", neighborAdvert(web.OFPort, web.MAC, client.MAC, podIP(t, web, true), podIP(t, client, true), podIP(t, web, true)), client.OFPort},
	} {
		t.Run(tc.name, func(t *testing.T) {
			wantDelivered(t, trace(t, c.tracers[1], tc.pkt, CTNew), tc.port)
		})
	}
}

func arpReplyFrom(pod PodPort, spa netip.Addr, tha net.HardwareAddr, tpa netip.Addr) Packet {
	return Packet{
		InPort: pod.OFPort, EthSrc: pod.MAC, EthDst: tha, EthType: EthTypeARP,
		ARPOp: arpOpReply, ARPSha: pod.MAC, ARPSpa: spa, ARPTha: tha, ARPTpa: tpa,
	}
}

func TestNeighborRequestsNotAnswered(t *testing.T) {
	c := newCluster(t)
	web, node := c.pod(1, 0), c.nodes[1].node
	gw4 := ip("10.244.1.1")
	for _, tc := range []struct {
		name  string
		pkt   Packet
		where Table
	}{
		{"pod ARPs for a remote pod", arpRequest(web.OFPort, web.MAC, podIP(t, web, false), ip("10.244.2.10")), ARPResponder},
		{"host's gratuitous ARP for the gateway", arpRequest(gatewayPort, node.GatewayMAC, gw4, gw4), ARPResponder},
		{"pod solicits a remote pod", neighborSolicit(web.OFPort, web.MAC, podIP(t, web, true), ip("fd00:10:244:2::a")), NDResponder},
	} {
		t.Run(tc.name, func(t *testing.T) {
			wantDropped(t, trace(t, c.tracers[1], tc.pkt, CTNew), tc.where)
		})
	}
}

// TestHostResolvesRemotePods: the host's ARP and NS for remote pod addresses are answered
// with the remote gateway's MAC, so routes over the gateway port work.
func TestHostResolvesRemotePods(t *testing.T) {
	c := newCluster(t)
	node := c.nodes[1].node
	r := trace(t, c.tracers[1], arpRequest(gatewayPort, node.GatewayMAC, ip("10.244.1.1"), ip("10.244.2.10")), CTNew)
	reply := wantDelivered(t, r, gatewayPort)
	wantMAC(t, "arp_sha", reply.ARPSha, gwMAC(2))
	wantAddr(t, "arp_spa", reply.ARPSpa, ip("10.244.2.10"))
	wantAddr(t, "arp_tpa", reply.ARPTpa, ip("10.244.1.1"))

	target := ip("fd00:10:244:3::a")
	r = trace(t, c.tracers[1], neighborSolicit(gatewayPort, node.GatewayMAC, ip("fd00:10:244:1::1"), target), CTNew)
	na := wantDelivered(t, r, gatewayPort)
	wantMAC(t, "nd_tll", na.NDTLL, gwMAC(3))
	wantAddr(t, "ipv6_src", na.IPSrc, target)
	if na.NDReserved != naSolicited|naOverride {
		t.Errorf("flags = %#x, want solicited|override", na.NDReserved)
	}
}
