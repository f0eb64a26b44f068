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
//   - ServiceLB sends every SCTP packet to ClusterIP:port (not only +new: conntrack state
//     means nothing for SCTP here) to the port's group, whose hash over addresses and
//     ports keeps an association on one endpoint.
//   - The endpoint's EndpointDNAT flow rewrites the destination with set_field (OVS
//     recomputes the SCTP checksum) and learns, in SCTPUnNAT, the flow of the replies:
//     from the endpoint's address and port to the client's, rewritten to come from
//     ClusterIP:port. Every forward packet learns it again, so it lives while the
//     association does (sctpReplyIdleTimeout without packets). The packet then goes on to
//     EgressPolicy, which, like the backend's IngressPolicy, sees the real endpoint.
//   - Replies: ConntrackState looks SCTP packets up in SCTPReply (learned in
//     ConntrackCommit from the translated packet, so it matches the endpoint's real
//     address) and only then in SCTPUnNAT, which rewrites the source back.
//   - The learned flows carry a CategoryLearned cookie, so the agent deletes them with the
//     SCTP replies after every policy change; the next forward packet of a live
//     association learns its flow again, and replies sent before it are lost (SCTP
//     retransmits them).
//
// Left out: NodePorts (the agent gives stateless ports none) and hairpin (a pod reaching
// itself through the Service gets its own packet back, which its kernel drops).

// statelessEndpointActions are the EndpointDNAT actions of one endpoint of a stateless
// SCTP port (after the affinity learn, which needs the ClusterIP as destination).
func (b *Builder) statelessEndpointActions(p ServicePort, ep netip.AddrPort) []Action {
	learn := LearnSCTPUnNAT{Table: SCTPUnNAT, Priority: prioSCTPUnNATFlow, IdleTimeout: sctpReplyIdleTimeout,
		Cookie: NewCookie(b.round, CategoryLearned, 0), Service: netip.AddrPortFrom(p.ClusterIP, p.Port)}
	return []Action{SetIPDst(ep.Addr()), SetSCTPPort{Port: ep.Port()}, learn, Goto(EgressPolicy)}
}

// prioSCTPUnNATFlow is the priority of the learned flows in SCTPUnNAT.
const prioSCTPUnNATFlow = 100

// SetIPDst writes the packet's destination address (IPv4 or IPv6).
func SetIPDst(a netip.Addr) SetField {
	if a.Is6() {
		return setExact(FieldIPv6Dst, a.AsSlice())
	}
	return setExact(FieldIPv4Dst, a.AsSlice())
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

// LearnSCTPUnNAT learns, from an SCTP packet translated to a Service endpoint, a flow in
// Table that matches the endpoint's replies (addresses and ports swapped) and rewrites
// their source to Service (ClusterIP and port), with Cookie, removed after IdleTimeout
// seconds without packets.
type LearnSCTPUnNAT struct {
	Table       Table
	Priority    uint16
	IdleTimeout uint16
	Cookie      Cookie
	Service     netip.AddrPort
}

// String renders the action as ovs-ofctl dump-flows prints it.
func (a LearnSCTPUnNAT) String() string {
	ipv6 := a.Service.Addr().Is6()
	src, _ := learnAddrFields(ipv6)
	return learnAction(a.Table, a.IdleTimeout, a.Priority, a.Cookie, ipv6, IPProtoSCTP,
		append(learnSCTPReverse(ipv6), "load:"+subvalue(a.Service.Addr().AsSlice())+"->"+src,
			fmt.Sprintf("load:%#x->OXM_OF_SCTP_SRC[]", a.Service.Port()))...)
}

// LearnedFlow is the flow the action learns from pkt (already translated): the match of
// the endpoint's replies, rewritten to come from the Service.
func (a LearnSCTPUnNAT) LearnedFlow(pkt Packet) Flow {
	ipv6 := a.Service.Addr().Is6()
	src := setExact(FieldIPv4Src, a.Service.Addr().AsSlice())
	if ipv6 {
		src = setExact(FieldIPv6Src, a.Service.Addr().AsSlice())
	}
	return Flow{Table: a.Table, Priority: a.Priority, Cookie: a.Cookie, Match: sctpReplyMatch(pkt, ipv6),
		Actions: []Action{src, SetSCTPPort{Src: true, Port: a.Service.Port()}}}
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
