package pipeline

import "net/netip"

// baseStage is the flows that belong to no object (BaseFlows), in the tables every packet
// crosses: one object, compiled again only when the node or the round changes.
func baseStage() Stage {
	return Stage{Name: "base", Category: CategoryBase,
		Tables: []Table{Classifier, SpoofGuard, ARPResponder, NDResponder, NDReply, ConntrackZone, ConntrackState,
			SCTPReply, L3Forwarding, L3DecTTL, ConntrackCommit, Output},
		Objects: func(*Snapshot) []Object {
			return []Object{{Key: "node", Compile: func(b *Builder) (ObjectFlows, error) { return ObjectFlows{Flows: b.BaseFlows()}, nil }}}
		}}
}

// BaseFlows are the flows that belong to no object: every table's miss flow, conntrack,
// the routing guards, TTL handling, the policy bypass for established connections and
// output.
func (b *Builder) BaseFlows() []Flow {
	s := b.owner(CategoryBase, 0)
	b.missFlows(s)
	for _, proto := range b.families() {
		conntrackFlows(s, proto)
		s.add(L3DecTTL, prioDecTTL, MatchProtocol(proto), DecTTL{}, Goto(AdminIngressPolicy))
	}
	if b.node.hasFamily(true) {
		ndGuardFlows(s)
	}
	b.routingGuardFlows(s)
	conntrackStateFlows(s)
	b.sctpFlows(s)
	// The host already routed what comes from the gateway port (and decremented its TTL if
	// it forwarded it); OVS only routes for pods and for traffic from the tunnel.
	s.add(L3DecTTL, prioDecTTLSkip, MatchAll().Reg(PortClassGateway.Mark()), Goto(AdminIngressPolicy))
	s.add(Output, prioOutput, MatchAll(), OutputReg{Field: OutPortField})
	return s.flows
}

// missFlows adds each table's priority-0 flow, as the table declares it.
func (b *Builder) missFlows(s *flowSet) {
	for _, t := range b.tables {
		if next, ok := t.missTargetIn(b.tables); ok {
			s.add(t, prioMiss, MatchAll(), Goto(next))
			continue
		}
		s.add(t, prioMiss, MatchAll(), Drop{})
	}
}

// conntrackFlows send every IP packet through conntrack (un-NATing replies) and commit the
// new connections that reach the end of the pipeline.
func conntrackFlows(s *flowSet, proto Protocol) {
	track := CT{Zone: CTZone, Recirculate: true, Table: ConntrackState, NAT: true}
	s.add(ConntrackZone, prioConntrack, MatchProtocol(proto), track)
	commit := CT{Commit: true, Zone: CTZone}
	s.add(ConntrackCommit, prioConntrack, MatchProtocol(proto).CTState(CTNew|CTTracked, 0), commit, Goto(Output))
}

// conntrackStateFlows drop invalid packets and let packets of established or related
// connections skip both policy stages: NetworkPolicy is stateful.
//
// Invalid packets from the gateway port are the exception: the host routes, and a pod's
// connection to another node's address returns through that node's gateway, whose OVS
// never saw the SYN and finds the SYN-ACK invalid. The host's own conntrack keeps those
// connections; OVS forwards them.
func conntrackStateFlows(s *flowSet) {
	s.add(ConntrackState, prioCTHostInv, MatchAll().CTState(CTInvalid|CTTracked, 0).Reg(PortClassGateway.Mark()), Goto(L3Forwarding))
	s.add(ConntrackState, prioCTInvalid, MatchAll().CTState(CTInvalid|CTTracked, 0), Drop{})
	s.add(ConntrackState, prioCTEstab, MatchAll().CTState(CTEstablished|CTTracked, CTNew), Goto(L3Forwarding))
	s.add(ConntrackState, prioCTRelated, MatchAll().CTState(CTRelated|CTTracked, CTNew), Goto(L3Forwarding))
	// Not for SCTP, whose conntrack state is never trusted (flows_sctp.go).
	trusted := MatchAll().Reg(SCTPStateConntrack.Mark())
	s.add(IngressPolicy, prioPolicyEstab, trusted.CTState(CTEstablished|CTTracked, CTNew), Goto(ConntrackCommit))
	s.add(IngressPolicy, prioPolicyRel, trusted.CTState(CTRelated|CTTracked, CTNew), Goto(ConntrackCommit))
}

// ndGuardFlows keep neighbour discovery out of conntrack and routing. A pod's NS or NA that
// failed its SpoofGuard checks is dropped there; in NDResponder, whatever ND message was
// neither answered nor delivered is dropped (RS, RA and redirects included: pods get
// their routes from CNI, and no pod may advertise itself as a router).
func ndGuardFlows(s *flowSet) {
	fromPod := MatchProtocol(ProtoICMPv6).Reg(PortClassPod.Mark())
	s.add(SpoofGuard, prioSpoofNDReject, fromPod.ICMPv6Type(ndNeighborSolicit), Drop{})
	s.add(SpoofGuard, prioSpoofNDReject, fromPod.ICMPv6Type(ndNeighborAdvert), Drop{})
	for t := ndRouterSolicit; t <= ndRedirect; t++ {
		s.add(NDResponder, prioNeighborDrop, MatchProtocol(ProtoICMPv6).ICMPv6Type(t), Drop{})
	}
}

// routingGuardFlows drop what L3Forwarding must never route: multicast and broadcast,
// link-local sources and destinations, tunnel traffic that is not for this node (no transit), and addresses inside the cluster
// CIDRs that no pod or node owns.
func (b *Builder) routingGuardFlows(s *flowSet) {
	for _, proto := range b.families() {
		for _, p := range multicast(proto) {
			s.add(L3Forwarding, prioL3Multicast, MatchProtocol(proto).IPDst(p), Drop{})
		}
		if proto == ProtoIPv6 {
			// Link-local traffic stays on its link: never routed between ports.
			s.add(L3Forwarding, prioL3Multicast, MatchProtocol(proto).IPSrc(linkLocal()), Drop{})
			s.add(L3Forwarding, prioL3Multicast, MatchProtocol(proto).IPDst(linkLocal()), Drop{})
		}
	}
	s.add(L3Forwarding, prioL3NoTransit, MatchAll().Reg(PortClassTunnel.Mark()), Drop{})
	for _, c := range b.node.ClusterCIDRs {
		if b.node.hasFamily(c.Addr().Is6()) {
			s.add(L3Forwarding, prioL3Cluster, MatchProtocol(ipProto(c.Addr())).IPDst(c), Drop{})
		}
	}
}

func multicast(proto Protocol) []netip.Prefix {
	if proto == ProtoIPv6 {
		return []netip.Prefix{netip.MustParsePrefix("ff00::/8")}
	}
	return []netip.Prefix{netip.MustParsePrefix("224.0.0.0/4"), netip.MustParsePrefix("255.255.255.255/32")}
}
