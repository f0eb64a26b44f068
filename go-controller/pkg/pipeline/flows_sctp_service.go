package pipeline

import (
	"fmt"
	"net/netip"
)

// SCTP Services without conntrack. OVS 3.1's userspace conntrack tracks SCTP without
// ports (flows_sctp.go), so ct(nat) cannot translate an SCTP port. On the userspace
// datapath a Service's SCTP port is therefore translated statelessly
// (ServicePort.Stateless):
//
//   - ServiceLB sends every SCTP packet to ClusterIP:port (or ClusterIP:nodePort from the
//     gateway) that no pin translated (below) to the port's group, whose hash over
//     addresses and ports picks an endpoint.
//   - The endpoint's EndpointDNAT flow learns two flows, then rewrites the destination
//     with set_field (OVS recomputes the SCTP checksum) and goes on to EgressPolicy, which,
//     like the backend's IngressPolicy, sees the real endpoint:
//     a pin in SCTPPin: this association's later packets (client address and port,
//     ClusterIP and port) are rewritten to this endpoint, whatever the group says later;
//     the un-NAT flow in SCTPUnNAT: the replies, from the endpoint's address and port to
//     the client's, are rewritten to come from the address and port the client used.
//     Both are learned before the rewrite, from the packet as the client sent it, so the
//     same flows serve ClusterIP:port and ClusterIP:nodePort.
//   - ConntrackState resubmits every SCTP packet to SCTPReply (learned in ConntrackCommit
//     from the translated packet, so it matches the endpoint's real address), then to
//     SCTPUnNAT (replies are rewritten back), then to SCTPPin (later packets of an
//     association are rewritten to its endpoint; ServiceLB then no longer matches them).
//     A pinned association keeps its endpoint while the Service's endpoints change (its
//     packets never reach the group again), as conntrack keeps a TCP connection's
//     translation.
//   - Pins and un-NAT flows are kept alive by their own packets (forward and reply) for
//     sctpReplyIdleTimeout. Their cookie names the port and endpoint
//     (SCTPTranslationFilter): they outlive policy changes (they decide nothing: policy
//     still sees every packet) and an endpoint that is not ready or terminating, so
//     established associations finish; the agent deletes them once the endpoint has left
//     the port's EndpointSlices (ServicePort.Listed), so a client that keeps its port does
//     not stay pinned to a pod that is gone.
//   - Hairpin: a pod reaching itself through the Service matches its own EndpointDNAT
//     flow (in_port and source = the pod), which also rewrites the source to the hairpin
//     address (the pod's kernel drops a packet from itself) and learns pin and un-NAT
//     flows that do the same; EgressPolicy lets the hairpin address through, as
//     IngressPolicy does.

// statelessEndpointActions are the EndpointDNAT actions of one endpoint of a stateless
// SCTP port (after the affinity learn, which needs the ClusterIP as destination). With a
// valid hairpin address, the source is rewritten to it.
func (b *Builder) statelessEndpointActions(p ServicePort, ep netip.AddrPort, hairpin netip.Addr) []Action {
	learned := SCTPTranslation{Priority: prioSCTPTranslationFlow, IdleTimeout: sctpReplyIdleTimeout,
		Cookie: sctpTranslationCookie(b.round, p, ep), Endpoint: ep, Hairpin: hairpin}
	pin, unNAT := LearnSCTPPin(learned), LearnSCTPUnNAT(learned)
	pin.Table, unNAT.Table = SCTPPin, SCTPUnNAT
	out := []Action{pin, unNAT}
	out = append(out, pin.rewrite()...)
	return append(out, Goto(AdminEgressPolicy))
}

// statelessHairpinFlows are the EndpointDNAT flows of local pods that reach themselves
// through a stateless SCTP port they are an endpoint of (above the endpoint's own flow),
// and EgressPolicy's pass for the hairpin address.
func (b *Builder) statelessHairpinFlows(s *flowSet, ports []ServicePort, pods []PodPort) {
	local := map[netip.Addr]PodPort{}
	for _, pod := range pods {
		for _, ip := range pod.IPs {
			local[ip] = pod
		}
	}
	families := map[Protocol]bool{}
	for _, p := range ports {
		if !p.Stateless || !b.node.hasFamily(p.ClusterIP.Is6()) {
			continue
		}
		proto := p.protocol()
		for _, ep := range p.Internal.Endpoints {
			pod, ok := local[ep.Addr()]
			if !ok {
				continue
			}
			families[ipProto(ep.Addr())] = true
			m := MatchProtocol(proto).InPort(pod.OFPort).IPSrc(host(ep.Addr())).
				Reg(EndpointKeyField.Mark(EndpointKey(ep))).Reg(ServiceGroupField.Mark(p.Internal.ID))
			var actions []Action
			if p.AffinityTimeout != 0 {
				actions = append(actions, p.learnAffinity())
			}
			s.add(EndpointDNAT, prioEndpointDNATHairpin, m,
				append(actions, b.statelessEndpointActions(p, ep, hairpinAddr(ipProto(ep.Addr())))...)...)
		}
	}
	for _, family := range b.families() {
		if families[family] {
			sctp, _ := TransportProtocol(IPProtoSCTP, family == ProtoIPv6)
			// The hairpin address is never a pod's (SpoofGuard): only these translations
			// carry it. A pod reaching itself is always allowed.
			s.add(EgressPolicy, prioPolicySCTPReply, MatchProtocol(sctp).IPSrc(host(hairpinAddr(family))), Goto(L3Forwarding))
		}
	}
}

// Priorities of the stateless SCTP flows.
const (
	prioEndpointDNATHairpin = 210 // EndpointDNAT: a pod reaching itself
	prioSCTPTranslationFlow = 100 // SCTPPin, SCTPUnNAT: the learned flows
)

// SetIPDst writes the packet's destination address (IPv4 or IPv6).
func SetIPDst(a netip.Addr) SetField { return setAddr(a, FieldIPv4Dst, FieldIPv6Dst) }

// SetIPSrc writes the packet's source address (IPv4 or IPv6).
func SetIPSrc(a netip.Addr) SetField { return setAddr(a, FieldIPv4Src, FieldIPv6Src) }

func setAddr(a netip.Addr, v4, v6 Field) SetField {
	if a.Is6() {
		return setExact(v6, a.AsSlice())
	}
	return setExact(v4, a.AsSlice())
}

// SetSCTPPort writes the packet's SCTP destination port, or with Src its source port.
type SetSCTPPort struct {
	Src  bool
	Port uint16
}

func (a SetSCTPPort) String() string {
	if a.Src {
		return fmt.Sprintf("set_field:%d->sctp_src", a.Port)
	}
	return fmt.Sprintf("set_field:%d->sctp_dst", a.Port)
}

// SCTPTranslation is what the two learn actions of a stateless SCTP Service endpoint
// share: learned flows in Table with Priority and Cookie, removed after IdleTimeout
// seconds without packets, for associations translated to Endpoint (and, with a valid
// Hairpin address, from it).
type SCTPTranslation struct {
	Table       Table
	Priority    uint16
	IdleTimeout uint16
	Cookie      Cookie
	Endpoint    netip.AddrPort
	Hairpin     netip.Addr
}

// LearnSCTPPin learns, from the first packet of an SCTP association to a Service port
// (before its translation), a flow that matches the association's later packets (the
// same addresses and ports) and rewrites them to Endpoint, and with a valid Hairpin
// address their source to it.
type LearnSCTPPin SCTPTranslation

// String renders the action as ovs-ofctl dump-flows prints it.
func (a LearnSCTPPin) String() string {
	ipv6 := a.Endpoint.Addr().Is6()
	src, dst := learnAddrFields(ipv6)
	specs := []string{src, dst, "OXM_OF_SCTP_SRC[]", "OXM_OF_SCTP_DST[]",
		"load:" + subvalue(a.Endpoint.Addr().AsSlice()) + "->" + dst,
		fmt.Sprintf("load:%#x->OXM_OF_SCTP_DST[]", a.Endpoint.Port())}
	if a.Hairpin.IsValid() {
		specs = append(specs, "load:"+subvalue(a.Hairpin.AsSlice())+"->"+src)
	}
	return learnAction(a.Table, a.IdleTimeout, a.Priority, a.Cookie, ipv6, IPProtoSCTP, specs...)
}

// rewrite is the translation the pin's flow does, and the EndpointDNAT flow before it.
func (a LearnSCTPPin) rewrite() []Action {
	out := []Action{SetIPDst(a.Endpoint.Addr()), SetSCTPPort{Port: a.Endpoint.Port()}}
	if a.Hairpin.IsValid() {
		out = append(out, SetIPSrc(a.Hairpin))
	}
	return out
}

// LearnedFlow is the flow the action learns from pkt (not yet translated).
func (a LearnSCTPPin) LearnedFlow(pkt Packet) Flow {
	m := sctpMatch(netip.AddrPortFrom(pkt.IPSrc, pkt.SrcPort), netip.AddrPortFrom(pkt.IPDst, pkt.DstPort))
	return Flow{Table: a.Table, Priority: a.Priority, Cookie: a.Cookie, Match: m, Actions: a.rewrite()}
}

// LearnSCTPUnNAT learns, from an SCTP packet to a Service port (before its translation to
// Endpoint), a flow that matches the endpoint's replies (from Endpoint to the client's
// address and port; to the Hairpin address instead, if valid) and rewrites their source
// to the address and port the client sent to (and with Hairpin their destination back to
// the client).
type LearnSCTPUnNAT SCTPTranslation

// String renders the action as ovs-ofctl dump-flows prints it.
func (a LearnSCTPUnNAT) String() string {
	ipv6 := a.Endpoint.Addr().Is6()
	src, dst := learnAddrFields(ipv6)
	name := "ip"
	if ipv6 {
		name = "ipv6"
	}
	client := dst + "=" + src
	if a.Hairpin.IsValid() {
		client = name + "_dst=" + a.Hairpin.String()
	}
	specs := []string{name + "_src=" + a.Endpoint.Addr().String(), client,
		fmt.Sprintf("sctp_src=%d", a.Endpoint.Port()), "OXM_OF_SCTP_DST[]=OXM_OF_SCTP_SRC[]",
		"load:" + dst + "->" + src, "load:OXM_OF_SCTP_DST[]->OXM_OF_SCTP_SRC[]"}
	if a.Hairpin.IsValid() {
		specs = append(specs, "load:"+subvalue(a.Endpoint.Addr().AsSlice())+"->"+dst)
	}
	return learnAction(a.Table, a.IdleTimeout, a.Priority, a.Cookie, ipv6, IPProtoSCTP, specs...)
}

// LearnedFlow is the flow the action learns from pkt (not yet translated): the match of
// the endpoint's replies, rewritten to come from where pkt went.
func (a LearnSCTPUnNAT) LearnedFlow(pkt Packet) Flow {
	client := pkt.IPSrc
	if a.Hairpin.IsValid() {
		client = a.Hairpin
	}
	m := sctpMatch(a.Endpoint, netip.AddrPortFrom(client, pkt.SrcPort))
	actions := []Action{SetIPSrc(pkt.IPDst), SetSCTPPort{Src: true, Port: pkt.DstPort}}
	if a.Hairpin.IsValid() {
		actions = append(actions, SetIPDst(a.Endpoint.Addr()))
	}
	return Flow{Table: a.Table, Priority: a.Priority, Cookie: a.Cookie, Match: m, Actions: actions}
}

// subvalue prints an immediate as OVS prints learn's load values: hex without leading
// zero bytes, "0" for zero.
func subvalue(b []byte) string {
	for i, v := range b {
		if v != 0 {
			s := fmt.Sprintf("%#x", v)
			for _, w := range b[i+1:] {
				s += fmt.Sprintf("%02x", w)
			}
			return s
		}
	}
	return "0"
}
