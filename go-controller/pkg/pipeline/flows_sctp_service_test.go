package pipeline

import (
	"net/netip"
	"strings"
	"testing"
)

// TestStatelessSCTPServiceTranslationAndReply: on the userspace datapath an SCTP
// ClusterIP is translated without conntrack. Every packet of an association, whatever
// conntrack says, reaches the same endpoint with its destination rewritten; the
// endpoint's reply passes SCTPReply (learned with the endpoint's real address) and is
// rewritten back to come from the ClusterIP.
func TestStatelessSCTPServiceTranslationAndReply(t *testing.T) {
	sc, flows, groups := serviceScenario(t)
	client := sc.pods[1]
	for _, tc := range []struct {
		vip       netip.Addr
		endpoints map[netip.Addr]int // endpoint -> its node
	}{
		{sigVIP4, map[netip.Addr]int{ip("10.244.2.10"): 2, ip("10.244.3.10"): 3}},
		{sigVIP6, map[netip.Addr]int{ip("fd00:10:244:2::a"): 2, ip("fd00:10:244:3::a"): 3}},
	} {
		tr := NewTracer(flows).WithGroups(groups)
		fwd := servicePacket(t, client, tc.vip, IPProtoSCTP, 40000, 132)
		var backend netip.Addr
		for i, ct := range []CTFlags{CTNew, CTEstablished, CTEstablished | CTReply, CTNew} {
			r := trace(t, tr, fwd, ct)
			out := wantDelivered(t, r, tunnelPort)
			if _, ok := tc.endpoints[out.IPDst]; !ok || out.DstPort != 9132 {
				t.Fatalf("%s: packet %d went to %s:%d, want an endpoint on 9132:\n%s", tc.vip, i, out.IPDst, out.DstPort, r)
			}
			if i == 0 {
				backend = out.IPDst
			}
			if i == 0 && !tc.vip.Is6() {
				wantTables(t, r, "Classifier", "SpoofGuard", "ConntrackZone", "ConntrackState", "SCTPReply", "SCTPUnNAT", "SCTPPin",
					"ServiceLB", "EndpointDNAT", "AdminEgressPolicy", "EgressPolicy", "BaselineEgressPolicy", "L3Forwarding", "L3DecTTL",
					"AdminIngressPolicy", "IngressPolicy", "BaselineIngressPolicy", "ConntrackCommit", "Output")
			} else if out.IPDst != backend {
				t.Errorf("%s: packet %d (ct %s) went to %s, the association's first to %s", tc.vip, i, ct, out.IPDst, backend)
			}
			wantAddr(t, "source (the client, not NATed)", out.IPSrc, fwd.IPSrc)
		}
		learned := tr.Flows(LearnedFilter())
		var tables []string
		for _, f := range learned {
			tables = append(tables, f.Table.Name)
		}
		if got := strings.Join(tables, " "); got != "SCTPReply SCTPUnNAT SCTPPin" {
			t.Fatalf("%s: learned flows in %q, want one each in SCTPReply, SCTPUnNAT and SCTPPin: %v", tc.vip, got, learned)
		}

		// The reply from the endpoint, through the tunnel from its node.
		reply := sctpFrom(fromRemote(tc.endpoints[backend], backend, fwd.IPSrc, IPProtoSCTP, 0), 9132, 40000)
		for _, ct := range []CTFlags{CTNew, CTEstablished | CTReply} {
			rr := trace(t, tr, reply, ct)
			back := wantDelivered(t, rr, client.OFPort)
			if got := netip.AddrPortFrom(back.IPSrc, back.SrcPort); got != netip.AddrPortFrom(tc.vip, 132) {
				t.Errorf("%s: reply source = %s, want the Service:\n%s", tc.vip, got, rr)
			}
			if !stepMatched(rr, SCTPReply) || !stepMatched(rr, SCTPUnNAT) {
				t.Errorf("%s: reply not recognised in SCTPReply and SCTPUnNAT:\n%s", tc.vip, rr)
			}
		}

		// Another port of the client's, or the endpoint's other port, is no reply of the
		// association: not rewritten.
		for _, p := range []Packet{sctpFrom(reply, 9132, 40001), sctpFrom(reply, 9133, 40000)} {
			rr := trace(t, NewTracer(flows).WithGroups(groups), p, CTNew)
			if back := wantDelivered(t, rr, client.OFPort); back.IPSrc != backend {
				t.Errorf("%s: %d->%d rewritten to %s", tc.vip, p.SrcPort, p.DstPort, back.IPSrc)
			}
		}
	}
}

// stepMatched says whether a flow (not the miss) of table matched during the trace.
func stepMatched(r Result, table Table) bool {
	for _, s := range r.Steps {
		if s.Table == table && s.Matched && s.Flow.Priority != 0 {
			return true
		}
	}
	return false
}
