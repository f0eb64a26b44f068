package pipeline

import "fmt"

// SCTP and NetworkPolicy. ovs-vswitchd 3.1's userspace conntrack tracks SCTP by addresses
// only (orig=(src=A,dst=B,sport=0,dport=0)): once pod A has an association with pod B,
// every SCTP packet from B to A, from any port to any port, is +est in the reply direction
// of that entry and would skip policy. So conntrack state is never trusted for SCTP, on any
// datapath; policy decides every SCTP packet, and replies are recognised by their ports:
//
//   - ConntrackState loads SCTPState "policy" into SCTP packets, above its +est/+rel bypass,
//     and looks them up in SCTPReply (resubmit); a learned flow there loads "reply".
//   - EgressPolicy and IngressPolicy let replies through first; IngressPolicy's +est/+rel
//     bypass requires SCTPState 0, so every other SCTP packet meets the rules.
//   - ConntrackCommit, which only packets that passed the node's policy reach, learns from
//     each such SCTP packet (not from replies) the flow of its reply: addresses and ports
//     swapped, in SCTPReply, for sctpReplyIdleTimeout without packets. The source node
//     learns it after egress policy, the destination node after ingress policy, so each
//     lets through the replies its own policy would otherwise meet.
//   - Learned flows carry a CategoryLearned cookie: the agent's flow sync leaves them alone,
//     and the agent deletes the replies (LearnedReplyFilter) after every policy change, so
//     a change that denies a peer cuts its replies too (the next allowed packet of a live
//     association learns its reply again).
//   - SCTP Services on the userspace datapath are translated without conntrack
//     (flows_sctp_service.go): after SCTPReply, ConntrackState resubmits SCTP packets to
//     SCTPUnNAT, so replies are recognised by the backend's real address and port, then
//     rewritten back to the ClusterIP; and then to SCTPPin, which translates the later
//     packets of an association to the endpoint its first packet was given.
//
// SCTP packets still go through conntrack (Service NAT and related ICMP need it), and new
// ones are committed; only the state is ignored.

// sctpReplyIdleTimeout is how long a learned reply flow lives without packets, in seconds:
// longer than SCTP's heartbeat interval (30 s by default, RFC 9260), so an idle but live
// association keeps its flow.
const sctpReplyIdleTimeout uint16 = 120

// Priorities of the SCTP flows.
const (
	prioCTSCTP          = 195 // ConntrackState: below +inv (200), above +est (190) and +rel (180)
	prioPolicySCTPReply = 220 // EgressPolicy, IngressPolicy: above the +est/+rel bypass
	prioCommitSCTPNew   = 110 // ConntrackCommit: learn and commit a new SCTP packet
	prioCommitSCTP      = 105 // ConntrackCommit: learn
	prioSCTPReplyFlow   = 100 // SCTPReply: the learned flows
)

// sctpFlows are the base flows that make NetworkPolicy exact for SCTP (see above).
func (b *Builder) sctpFlows(s *flowSet) {
	reply := MatchAll().Reg(SCTPStateReply.Mark())
	s.add(EgressPolicy, prioPolicySCTPReply, reply, Goto(L3Forwarding))
	s.add(IngressPolicy, prioPolicySCTPReply, reply, Goto(ConntrackCommit))
	next, _ := ConntrackState.missTargetIn(b.tables)
	for _, family := range b.families() {
		sctp, _ := TransportProtocol(IPProtoSCTP, family == ProtoIPv6)
		s.add(ConntrackState, prioCTSCTP, MatchProtocol(sctp),
			LoadReg(SCTPStatePolicy.Mark()), Resubmit{Table: SCTPReply}, Resubmit{Table: SCTPUnNAT}, Resubmit{Table: SCTPPin}, Goto(next))
		learn := LearnSCTPReply{Table: SCTPReply, Priority: prioSCTPReplyFlow, IdleTimeout: sctpReplyIdleTimeout,
			Cookie: NewCookie(b.round, CategoryLearned, 0), IPv6: family == ProtoIPv6}
		checked := MatchProtocol(sctp).Reg(SCTPStatePolicy.Mark())
		s.add(ConntrackCommit, prioCommitSCTPNew, checked.CTState(CTNew|CTTracked, 0),
			learn, CT{Commit: true, Zone: CTZone}, Goto(Output))
		s.add(ConntrackCommit, prioCommitSCTP, checked, learn, Goto(Output))
	}
}

// LearnSCTPReply learns, from the SCTP packet being processed, a flow in Table that
// matches its replies (addresses and ports swapped) and loads SCTPState "reply", with
// Cookie, removed after IdleTimeout seconds without packets. Learning it again refreshes
// it.
type LearnSCTPReply struct {
	Table       Table
	Priority    uint16
	IdleTimeout uint16
	Cookie      Cookie
	IPv6        bool
}

// String renders the action as ovs-ofctl dump-flows prints it.
func (a LearnSCTPReply) String() string {
	mark := SCTPStateReply.Mark()
	return learnAction(a.Table, a.IdleTimeout, a.Priority, a.Cookie, a.IPv6, IPProtoSCTP,
		append(learnSCTPReverse(a.IPv6), fmt.Sprintf("load:%#x->%s", mark.Value, mark.Field.subfield()))...)
}

// LearnedFlow is the flow the action learns from pkt: the match of pkt's replies.
func (a LearnSCTPReply) LearnedFlow(pkt Packet) Flow {
	return Flow{Table: a.Table, Priority: a.Priority, Cookie: a.Cookie, Match: sctpReplyMatch(pkt, a.IPv6),
		Actions: []Action{LoadReg(SCTPStateReply.Mark())}}
}
