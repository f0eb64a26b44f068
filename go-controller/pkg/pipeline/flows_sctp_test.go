package pipeline

import (
	"slices"
	"strings"
	"testing"

	"github.com/kovs-net/kovs/go-controller/pkg/policy"
)

func TestSCTPFlowsText(t *testing.T) {
	sc := threeNodesDualStack(1)
	want := []string{
		"cookie=0x1010000000000, table=31, priority=195,sctp actions=set_field:0x100/0x300->reg0,resubmit(,32),resubmit(,46),resubmit(,47),goto_table:40",
		"cookie=0x1010000000000, table=31, priority=195,sctp6 actions=set_field:0x100/0x300->reg0,resubmit(,32),resubmit(,46),resubmit(,47),goto_table:40",
		"cookie=0x1010000000000, table=50, priority=220,reg0=0x200/0x300 actions=goto_table:60",
		"cookie=0x1010000000000, table=70, priority=220,reg0=0x200/0x300 actions=goto_table:80",
		"cookie=0x1010000000000, table=70, priority=210,ct_state=-new+est+trk,reg0=0/0x300 actions=goto_table:80",
		"cookie=0x1010000000000, table=70, priority=200,ct_state=-new+rel+trk,reg0=0/0x300 actions=goto_table:80",
		"cookie=0x1010000000000, table=80, priority=110,ct_state=+new+trk,sctp,reg0=0x100/0x300 actions=learn(table=32," +
			"idle_timeout=120,priority=100,cookie=0x1800000000000,eth_type=0x800,nw_proto=132,NXM_OF_IP_SRC[]=NXM_OF_IP_DST[]," +
			"NXM_OF_IP_DST[]=NXM_OF_IP_SRC[],OXM_OF_SCTP_SRC[]=OXM_OF_SCTP_DST[],OXM_OF_SCTP_DST[]=OXM_OF_SCTP_SRC[]," +
			"load:0x2->NXM_NX_REG0[8..9]),ct(commit,zone=65520),goto_table:90",
		"cookie=0x1010000000000, table=80, priority=105,sctp6,reg0=0x100/0x300 actions=learn(table=32," +
			"idle_timeout=120,priority=100,cookie=0x1800000000000,eth_type=0x86dd,nw_proto=132,NXM_NX_IPV6_SRC[]=NXM_NX_IPV6_DST[]," +
			"NXM_NX_IPV6_DST[]=NXM_NX_IPV6_SRC[],OXM_OF_SCTP_SRC[]=OXM_OF_SCTP_DST[],OXM_OF_SCTP_DST[]=OXM_OF_SCTP_SRC[]," +
			"load:0x2->NXM_NX_REG0[8..9]),goto_table:90",
	}
	var got []string
	for _, f := range sc.flows(t) {
		got = append(got, f.String())
	}
	for _, w := range want {
		if !slices.Contains(got, w) {
			t.Errorf("missing flow:\n  %s", w)
		}
	}
	// An IPv4-only node has no sctp6 flows.
	for _, f := range oneNodeTwoPods().flows(t) {
		if f.Match.Protocol() == ProtoSCTP6 || strings.Contains(f.String(), "0x86dd") {
			t.Errorf("IPv4-only node got %s", f)
		}
	}
}

func TestLearnedSCTPReplyFlow(t *testing.T) {
	a := LearnSCTPReply{Table: SCTPReply, Priority: 100, IdleTimeout: 120, Cookie: NewCookie(3, CategoryLearned, 0)}
	p := transportPacket(3, ip("10.244.1.10"), ip("10.244.3.10"), IPProtoSCTP, 80)
	want := "cookie=0x3800000000000, table=32, priority=100,sctp,nw_src=10.244.3.10,nw_dst=10.244.1.10,tp_src=80,tp_dst=40000 " +
		"actions=set_field:0x200/0x300->reg0"
	if got := a.LearnedFlow(p).String(); got != want {
		t.Errorf("learned flow\n got  %s\n want %s", got, want)
	}
	a.IPv6 = true
	p6 := transportPacket(3, ip("fd00:10:244:1::a"), ip("fd00:10:244:3::a"), IPProtoSCTP, 80)
	if got := a.LearnedFlow(p6).Match.String(); got != "sctp6,ipv6_src=fd00:10:244:3::a,ipv6_dst=fd00:10:244:1::a,tp_src=80,tp_dst=40000" {
		t.Errorf("learned IPv6 match = %s", got)
	}
	if c := a.LearnedFlow(p6).Cookie; !c.Learned() || !LearnedFilter().Matches(c) || c.Round() != 3 {
		t.Errorf("learned cookie %s: want category learned, round 3", c)
	}
}

func TestRegMatchesCombineInOneRegister(t *testing.T) {
	m := MatchAll().Reg(PortClassGateway.Mark()).Reg(SCTPStateConntrack.Mark())
	if got := m.String(); got != "reg0=0x3/0x30f" {
		t.Errorf("match = %s, want reg0=0x3/0x30f", got)
	}
	if got := m.Reg(PortClassPod.Mark()).String(); got != "reg0=0x1/0x30f" {
		t.Errorf("rematching PortClass = %s, want reg0=0x1/0x30f", got)
	}
}

// sctpFrom is an SCTP packet of one association: sport to dport.
func sctpFrom(p Packet, sport, dport uint16) Packet {
	p.SrcPort, p.DstPort = sport, dport
	return p
}

// TestSCTPPolicySourceNode: x/a (node-1) is isolated both ways; its egress allows all of
// SCTP, its ingress no SCTP at all. conntrack reports every SCTP packet between x/a and y/s
// (node-3) as established once they have talked, as the userspace datapath does; only
// the replies of x/a's own associations may pass.
func TestSCTPPolicySourceNode(t *testing.T) {
	a := policyPods()[0]
	a4 := podIP(t, a, false)
	tr := policyTracer(t, policyShare())

	// Before x/a sends anything, conntrack's "established" lets nothing in.
	in := sctpFrom(fromRemote(3, remoteS4, a4, IPProtoSCTP, 0), 9999, 40000)
	if policyVerdict(t, trace(t, tr, in, CTEstablished)) {
		t.Fatalf("y/s:9999 to x/a:40000 allowed before any association")
	}

	// x/a -> y/s:9999 is allowed by x/web egress 2; node-1 learns its reply.
	out := sctpFrom(fromLocal(t, a, remoteS4, IPProtoSCTP, 0), 40000, 9999)
	r := trace(t, tr, out, CTNew)
	wantDelivered(t, r, tunnelPort)
	wantTables(t, r, "Classifier", "SpoofGuard", "ConntrackZone", "ConntrackState", "SCTPReply", "SCTPUnNAT", "SCTPPin", "ServiceLB",
		"AdminEgressPolicy", "EgressPolicy", "L3Forwarding", "L3DecTTL", "AdminIngressPolicy", "IngressPolicy", "BaselineIngressPolicy",
		"ConntrackCommit", "Output")
	learned := tr.Flows(LearnedFilter())
	want := "sctp,nw_src=10.244.3.10,nw_dst=10.244.1.10,tp_src=9999,tp_dst=40000"
	if len(learned) != 1 || learned[0].Match.String() != want || learned[0].Table != SCTPReply {
		t.Fatalf("learned %v, want one SCTPReply flow %s", learned, want)
	}
	// Again: the same flow is refreshed, not added twice.
	trace(t, tr, out, CTEstablished)
	if n := len(tr.Flows(LearnedFilter())); n != 1 {
		t.Errorf("%d learned flows after a second packet, want 1", n)
	}

	// The reply passes x/a's ingress isolation, whatever conntrack says.
	for _, ct := range []CTFlags{CTEstablished, CTNew} {
		r = trace(t, tr, in, ct)
		wantDelivered(t, r, ofportA)
		if s := r.Steps[len(r.Steps)-3]; s.Table != IngressPolicy || s.Flow.Priority != prioPolicySCTPReply {
			t.Errorf("reply did not pass IngressPolicy as a learned SCTP reply:\n%s", r)
		}
	}

	// Any other SCTP packet from y/s is a new association: ingress policy drops it, though
	// conntrack (by addresses only) calls it established. It learns nothing.
	for _, p := range []Packet{sctpFrom(in, 5000, 40000), sctpFrom(in, 9999, 40001), sctpFrom(in, 40000, 9999)} {
		r := trace(t, tr, p, CTEstablished)
		if policyVerdict(t, r) {
			t.Errorf("y/s:%d to x/a:%d allowed:\n%s", p.SrcPort, p.DstPort, r)
		} else if kind, port := denyingFlow(r); kind != PolicyKindIngressDeny || port != ofportA {
			t.Errorf("dropped by %s of %d, want x/a's ingress deny", kind, port)
		}
	}
	if n := len(tr.Flows(LearnedFilter())); n != 1 {
		t.Errorf("%d learned flows after denied packets, want 1", n)
	}
	// TCP keeps trusting conntrack.
	tcpReply := fromRemote(3, remoteS4, a4, IPProtoTCP, 40000)
	if !policyVerdict(t, trace(t, tr, tcpReply, CTEstablished)) {
		t.Errorf("TCP reply of an established connection dropped")
	}
}

// TestSCTPPolicyDestinationNode: the destination pod's node learns the reply after
// ingress policy, so an egress-isolated server answers the clients its ingress allows,
// and only them.
func TestSCTPPolicyDestinationNode(t *testing.T) {
	d := policyPods()[4]
	d6 := podIP(t, d, true)
	share := policyShare()
	share.Isolation.Egress = append(share.Isolation.Egress, key("x", "d"))
	tr := policyTracer(t, share)

	in := sctpFrom(fromRemote(3, remoteS6, d6, IPProtoSCTP, 0), 40000, 7)
	wantDelivered(t, trace(t, tr, in, CTNew), ofportD) // x/open allows everything in
	answer := sctpFrom(fromLocal(t, d, remoteS6, IPProtoSCTP, 0), 7, 40000)
	r := trace(t, tr, answer, CTEstablished)
	wantDelivered(t, r, tunnelPort)
	if !slices.ContainsFunc(r.Steps, func(s Step) bool { return s.Table == EgressPolicy && s.Flow.Priority == prioPolicySCTPReply }) {
		t.Errorf("reply did not skip EgressPolicy as a learned SCTP reply:\n%s", r)
	}
	other := sctpFrom(answer, 7, 40001)
	if r := trace(t, tr, other, CTEstablished); policyVerdict(t, r) {
		t.Errorf("x/d:7 to y/s:40001 (no association) allowed:\n%s", r)
	} else if kind, port := denyingFlow(r); kind != PolicyKindEgressDeny || port != ofportD {
		t.Errorf("dropped by %s of %d, want x/d's egress deny", kind, port)
	}
}

// TestSCTPPolicyChangeDropsLearnedReplies: a policy change that denies the peer must cut
// the replies of its associations too. The new flows alone do not (the learned reply
// outlives them); the agent deletes the learned flows by cookie after the change.
func TestSCTPPolicyChangeDropsLearnedReplies(t *testing.T) {
	a := policyPods()[0]
	a4 := podIP(t, a, false)
	before := policyTracer(t, policyShare())
	out := sctpFrom(fromLocal(t, a, remoteS4, IPProtoSCTP, 0), 40000, 9999)
	wantDelivered(t, trace(t, before, out, CTNew), tunnelPort)

	// x/web loses egress 2: x/a may no longer send SCTP to y/s.
	share := policyShare()
	delete(share.Rules, "x/web/egress/2")
	sc := policyScenario()
	sc.policy = &share
	after := NewTracer(append(sc.flows(t), before.Flows(LearnedFilter())...))

	in := sctpFrom(fromRemote(3, remoteS4, a4, IPProtoSCTP, 0), 9999, 40000)
	if !policyVerdict(t, trace(t, after, in, CTEstablished)) {
		t.Fatalf("premise: the learned reply flow should still let the reply in")
	}
	after.DeleteFlows(LearnedFilter()) // what the agent does after every policy change
	r := trace(t, after, in, CTEstablished)
	if policyVerdict(t, r) {
		t.Fatalf("reply allowed after the policy change:\n%s", r)
	}
	if kind, port := denyingFlow(r); kind != PolicyKindIngressDeny || port != ofportA {
		t.Errorf("dropped by %s of %d, want x/a's ingress deny", kind, port)
	}
	r = trace(t, after, out, CTEstablished)
	if policyVerdict(t, r) {
		t.Fatalf("x/a to y/s SCTP allowed after its rule was deleted:\n%s", r)
	}
	if n := len(after.Flows(LearnedFilter())); n != 0 {
		t.Errorf("a denied packet learned %d flows", n)
	}
	_ = policy.SCTP
}
