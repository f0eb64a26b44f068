package pipeline

import (
	"net/netip"
	"slices"
)

// gatewayStage is the gateway port's flows (GatewayFlows): one object, which depends on
// the node only.
func gatewayStage() Stage {
	return Stage{Name: "gateway", Category: CategoryGateway,
		Objects: func(*Snapshot) []Object {
			return []Object{{Key: "gateway", Compile: func(b *Builder) (ObjectFlows, error) { return ObjectFlows{Flows: b.GatewayFlows()}, nil }}}
		}}
}

// GatewayFlows are the flows of the gateway port: its classification and spoof guard, the
// ARP and ND answers for the gateway addresses (towards pods only), delivery of neighbour
// replies addressed to the host, routing of node and off-cluster addresses to it, and the
// bypass of ingress policy for what the node sends to its pods.
func (b *Builder) GatewayFlows() []Flow {
	n := b.node
	s := b.owner(CategoryGateway, n.GatewayOFPort)
	s.add(Classifier, prioClassify, MatchAll().InPort(n.GatewayOFPort),
		LoadReg(PortClassGateway.Mark()), Goto(SpoofGuard))
	b.gatewaySpoofGuard(s)
	for _, ip := range n.GatewayIPs {
		b.gatewayResponder(s, ip)
		s.add(L3Forwarding, prioL3Local, MatchProtocol(ipProto(ip)).IPDst(host(ip)), b.toGateway()...)
	}
	for _, ip := range n.UnderlayIPs {
		if n.hasFamily(ip.Is6()) {
			s.add(L3Forwarding, prioL3Local, MatchProtocol(ipProto(ip)).IPDst(host(ip)), b.toGateway()...)
		}
	}
	for _, proto := range b.families() {
		fromPod := MatchProtocol(proto).Reg(PortClassPod.Mark())
		s.add(L3Forwarding, prioL3OffCluster, fromPod, b.toGateway()...)
	}
	// The node reaches its own pods whatever NetworkPolicy says (kubelet probes, node
	// daemons): what the host sends through the gateway port from one of the node's own
	// addresses skips ingress policy. What the host forwards from other sources (NodePort
	// with the client's address preserved, kube-proxy's DNAT) meets it.
	for _, ip := range b.nodeAddresses() {
		s.add(IngressPolicy, prioPolicyFromGateway, MatchProtocol(ipProto(ip)).Reg(PortClassGateway.Mark()).IPSrc(host(ip)),
			Goto(ConntrackCommit))
	}
	b.gatewayReturnFlows(s)
	return s.flows
}

// gatewaySpoofGuard admits what the host sends from the gateway's MAC. Its source
// addresses are not checked: nodes reach pods from any of their addresses.
func (b *Builder) gatewaySpoofGuard(s *flowSet) {
	n := b.node
	from := MatchAll().InPort(n.GatewayOFPort).EthSrc(n.GatewayMAC)
	if n.hasFamily(false) {
		s.add(SpoofGuard, prioSpoofSource, from.WithProtocol(ProtoARP), Goto(ARPResponder))
		s.add(SpoofGuard, prioSpoofSource, from.WithProtocol(ProtoIPv4), Goto(ConntrackZone))
	}
	if n.hasFamily(true) {
		s.add(SpoofGuard, prioSpoofSource, from.WithProtocol(ProtoIPv6), Goto(NDResponder))
	}
}

// gatewayResponder answers pods' ARP requests and neighbour solicitations for the gateway
// address ip, and delivers neighbour replies addressed to the gateway's MAC (pods
// answering the host) to the gateway port.
func (b *Builder) gatewayResponder(s *flowSet, ip netip.Addr) {
	n := b.node
	fromPod := PortClassPod.Mark()
	toGatewayMAC := MatchAll().EthDst(n.GatewayMAC)
	if ip.Is4() {
		request := MatchProtocol(ProtoARP).Reg(fromPod).ARPOp(arpOpRequest).ARPTpa(host(ip))
		s.add(ARPResponder, prioNeighborReply, request, arpReplyActions(n.GatewayMAC)...)
		s.add(ARPResponder, prioNeighborForward, toGatewayMAC.WithProtocol(ProtoARP).ARPOp(arpOpReply),
			OutputPort{Port: n.GatewayOFPort})
		return
	}
	solicit := solicitationMatch().Reg(fromPod).NDTarget(host(ip))
	s.add(NDResponder, prioNeighborReply, solicit, advertiseActions(n.GatewayMAC, naRouter|naSolicited|naOverride)...)
	s.add(NDReply, prioNeighborReply, advertisementMatch().NDTarget(host(ip)), replyActions(n.GatewayMAC)...)
	s.add(NDResponder, prioNeighborForward, toGatewayMAC.WithProtocol(ProtoICMPv6).ICMPv6Type(ndNeighborAdvert),
		OutputPort{Port: n.GatewayOFPort})
}

// toGateway hands a packet to the host: the gateway port, addressed to its MAC. No TTL
// decrement: the host's stack is the router from here on.
func (b *Builder) toGateway() []Action {
	return []Action{
		SetEthDst(b.node.GatewayMAC),
		LoadReg(OutPortField.Mark(b.node.GatewayOFPort)),
		Goto(IngressPolicy),
	}
}

// nodeAddresses are the node's own addresses of its pod families: the gateway's and the
// underlay's.
func (b *Builder) nodeAddresses() []netip.Addr {
	var out []netip.Addr
	for _, ip := range append(slices.Clone(b.node.GatewayIPs), b.node.UnderlayIPs...) {
		if b.node.hasFamily(ip.Is6()) && !slices.Contains(out, ip) {
			out = append(out, ip)
		}
	}
	return out
}

// CTMarkFromGateway marks (ct_mark) the connections that entered br-int from the gateway
// port.
const CTMarkFromGateway uint32 = 0x1

// gatewayReturnFlows send the replies of connections that entered from the gateway port
// back to the gateway, even when they are addressed to a pod: the host may have translated
// them (kube-proxy's DNAT of a pod's connection to a ClusterIP, with --service-proxy=none)
// and must see the replies to undo it. TCP and UDP connections the host forwards are
// committed with the mark.
func (b *Builder) gatewayReturnFlows(s *flowSet) {
	for _, proto := range b.families() {
		for _, l4 := range []uint8{IPProtoTCP, IPProtoUDP} {
			tp, _ := TransportProtocol(l4, proto == ProtoIPv6)
			s.add(ConntrackCommit, prioCommitFromGateway, MatchProtocol(tp).CTState(CTNew|CTTracked, 0).Reg(PortClassGateway.Mark()),
				CT{Commit: true, Zone: CTZone, Mark: CTMarkFromGateway, MarkMask: CTMarkFromGateway}, Goto(Output))
		}
		s.add(L3Forwarding, prioL3GatewayReply,
			MatchProtocol(proto).CTState(CTReply|CTTracked, 0).CTMark(CTMarkFromGateway, CTMarkFromGateway), b.toGateway()...)
		// The host's connection to a ClusterIP whose endpoint is no pod (a host-network
		// pod: a node's address): back to the host, which routes it (accept_local on the
		// gateway lets it take a packet from its own address).
		s.add(L3Forwarding, prioL3OffCluster, MatchProtocol(proto).CTState(CTDNAT|CTTracked, 0).Reg(PortClassGateway.Mark()),
			b.toGateway()...)
	}
	n := b.node
	s.add(Output, prioOutputToHost, MatchAll().Reg(OutPortField.Mark(n.GatewayOFPort)).InPort(n.GatewayOFPort), OutputInPort{})
}
