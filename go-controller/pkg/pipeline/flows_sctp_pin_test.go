package pipeline

import (
	"net/netip"
	"testing"
)

// sigPort is default/sig's IPv4 SCTP port (10.96.0.40:132), stateless, with endpoints on
// :9132 and, when nodePort is set, that NodePort.
func sigPort(nodePort uint16, endpoints ...string) ServicePort {
	g := ServiceGroup{ID: ServiceGroupBase | 7}
	for _, e := range endpoints {
		g.Endpoints = append(g.Endpoints, ep(e+":9132"))
	}
	return ServicePort{Name: "default/sig:sig/SCTP", ClusterIP: sigVIP4, IPProto: IPProtoSCTP, Port: 132,
		NodePort: nodePort, Internal: g, External: g, Stateless: true}
}

// sigTracer compiles node-1 of the dual-stack scenario with ports, and a tracer over its
// flows that starts with the learned flows given (as a switch keeps them while the agent
// rewrites its own).
func sigTracer(t *testing.T, ports []ServicePort, learned []Flow) (scenario, *Tracer) {
	t.Helper()
	sc := threeNodesDualStack(1)
	flows, groups := withServices(t, sc, ports)
	flows = append(flows, learned...)
	SortFlows(flows)
	return sc, NewTracer(flows).WithGroups(groups)
}

// TestStatelessSCTPPinOutlivesEndpointChanges: the first packet of an association pins it
// to the endpoint the group chose. Its later packets reach that endpoint while the Service's
// endpoints change, even once it has left the Service (an established association
// finishes, as a TCP connection does in conntrack), and after a policy change deleted the
// learned replies; new associations only go to the current endpoints.
func TestStatelessSCTPPinOutlivesEndpointChanges(t *testing.T) {
	sc, tr := sigTracer(t, []ServicePort{sigPort(0, "10.244.2.10", "10.244.3.10")}, nil)
	client := sc.pods[1]
	fwd := servicePacket(t, client, sigVIP4, IPProtoSCTP, 40000, 132)
	first := wantDelivered(t, trace(t, tr, fwd, CTNew), tunnelPort)
	backend := first.IPDst

	// The endpoints are replaced by four others: the pinned endpoint is gone.
	others := []string{"10.244.2.11", "10.244.2.12", "10.244.3.11", "10.244.3.12"}
	_, tr = sigTracer(t, []ServicePort{sigPort(0, others...)}, tr.Flows(LearnedFilter()))
	tr.DeleteFlows(LearnedReplyFilter()) // what the agent does after a policy change
	for i, ct := range []CTFlags{CTNew, CTEstablished} {
		r := trace(t, tr, fwd, ct)
		out := wantDelivered(t, r, tunnelPort)
		if got := netip.AddrPortFrom(out.IPDst, out.DstPort); got != netip.AddrPortFrom(backend, 9132) {
			t.Fatalf("packet %d of the association went to %s, want its endpoint %s:9132:\n%s", i+2, got, backend, r)
		}
		if !stepMatched(r, SCTPPin) || stepMatched(r, ServiceLB) {
			t.Errorf("packet %d not translated by its pin alone:\n%s", i+2, r)
		}
	}
	// The endpoint's reply is still rewritten to come from the Service.
	reply := sctpFrom(fromRemote(2, backend, fwd.IPSrc, IPProtoSCTP, 0), 9132, 40000)
	if backend.As4()[2] == 3 {
		reply = sctpFrom(fromRemote(3, backend, fwd.IPSrc, IPProtoSCTP, 0), 9132, 40000)
	}
	back := wantDelivered(t, trace(t, tr, reply, CTEstablished|CTReply), client.OFPort)
	if got := netip.AddrPortFrom(back.IPSrc, back.SrcPort); got != netip.AddrPortFrom(sigVIP4, 132) {
		t.Errorf("reply source = %s, want the Service", got)
	}
	// New associations: the current endpoints only.
	seen := map[netip.Addr]int{}
	for i := range 40 {
		out := wantDelivered(t, trace(t, tr, sctpFrom(fwd, uint16(41000+i), 132), CTNew), tunnelPort)
		seen[out.IPDst]++
	}
	if seen[backend] != 0 || len(seen) != len(others) {
		t.Errorf("40 new associations reached %v, want all of %v and not %s", seen, others, backend)
	}
}

// TestStatelessSCTPNodePort: an SCTP NodePort the host DNATed to ClusterIP:nodePort (and
// masqueraded) is translated to an endpoint's target port, and the endpoint's replies are
// rewritten to come from ClusterIP:nodePort, so the host's conntrack recognises them, and
// leave through the gateway port.
func TestStatelessSCTPNodePort(t *testing.T) {
	_, tr := sigTracer(t, []ServicePort{sigPort(30132, "10.244.2.10", "10.244.3.10")}, nil)
	in := transportPacket(gatewayPort, ip("10.244.1.1"), sigVIP4, IPProtoSCTP, 30132)
	in.EthSrc, in.EthDst, in.SrcPort = gwMAC(1), mac("0a:58:0a:f4:01:fe"), 45000
	for i := range 3 {
		out := wantDelivered(t, trace(t, tr, in, CTNew), tunnelPort)
		if out.DstPort != 9132 || (out.IPDst != ip("10.244.2.10") && out.IPDst != ip("10.244.3.10")) {
			t.Fatalf("NodePort packet %d went to %s:%d, want an endpoint on 9132", i, out.IPDst, out.DstPort)
		}
		wantAddr(t, "source (the host's, not rewritten)", out.IPSrc, in.IPSrc)
		peer := 2
		if out.IPDst == ip("10.244.3.10") {
			peer = 3
		}
		reply := sctpFrom(fromRemote(peer, out.IPDst, in.IPSrc, IPProtoSCTP, 0), 9132, 45000)
		rr := trace(t, tr, reply, CTEstablished|CTReply)
		back := wantDelivered(t, rr, gatewayPort)
		if got := netip.AddrPortFrom(back.IPSrc, back.SrcPort); got != netip.AddrPortFrom(sigVIP4, 30132) {
			t.Errorf("NodePort reply source = %s, want %s:30132:\n%s", got, sigVIP4, rr)
		}
	}
	// The NodePort is no ClusterIP port for pods.
	fromPod := servicePacket(t, threeNodesDualStack(1).pods[1], sigVIP4, IPProtoSCTP, 40000, 30132)
	if r := trace(t, tr, fromPod, CTNew); stepMatched(r, ServiceLB) {
		t.Errorf("a pod's packet to ClusterIP:nodePort was balanced:\n%s", r)
	}
}

// TestStatelessSCTPHairpin: a pod reaching itself through its SCTP Service gets the packet
// from the hairpin address, and its reply comes back from the Service; the association's
// later packets take the same way through the pin, past the pod's egress policy.
func TestStatelessSCTPHairpin(t *testing.T) {
	sc, tr := sigTracer(t, []ServicePort{sigPort(0, "10.244.1.10")}, nil)
	web := sc.pods[0]
	self := podIP(t, web, false)
	fwd := servicePacket(t, web, sigVIP4, IPProtoSCTP, 40000, 132)
	for i := range 2 {
		r := trace(t, tr, fwd, CTNew)
		out := wantDelivered(t, r, web.OFPort)
		if got := netip.AddrPortFrom(out.IPSrc, out.SrcPort); got != netip.AddrPortFrom(HairpinSNATv4, 40000) {
			t.Errorf("hairpin packet %d from %s, want %s:40000:\n%s", i, got, HairpinSNATv4, r)
		}
		if got := netip.AddrPortFrom(out.IPDst, out.DstPort); got != netip.AddrPortFrom(self, 9132) {
			t.Errorf("hairpin packet %d to %s, want %s:9132", i, got, self)
		}
		if i == 1 && !stepMatched(r, SCTPPin) {
			t.Errorf("second hairpin packet not pinned:\n%s", r)
		}
	}
	reply := transportPacket(web.OFPort, self, HairpinSNATv4, IPProtoSCTP, 40000)
	reply.SrcPort, reply.EthSrc, reply.EthDst = 9132, web.MAC, gwMAC(1)
	rr := trace(t, tr, reply, CTNew)
	back := wantDelivered(t, rr, web.OFPort)
	if got := netip.AddrPortFrom(back.IPSrc, back.SrcPort); got != netip.AddrPortFrom(sigVIP4, 132) {
		t.Errorf("hairpin reply from %s, want the Service:\n%s", got, rr)
	}
	if got := netip.AddrPortFrom(back.IPDst, back.DstPort); got != netip.AddrPortFrom(self, 40000) {
		t.Errorf("hairpin reply to %s, want %s:40000", got, self)
	}
}

// TestStatelessSCTPEvictedTranslationsMoveTheAssociation: once the agent deletes the
// learned translations of an endpoint that left the Service (SCTPTranslationFilter), the
// association's next packet goes to a current endpoint; other endpoints' translations,
// and the other learned flows, stay.
func TestStatelessSCTPEvictedTranslationsMoveTheAssociation(t *testing.T) {
	port := sigPort(0, "10.244.2.10", "10.244.3.10")
	sc, tr := sigTracer(t, []ServicePort{port}, nil)
	client := sc.pods[1]
	backends := map[uint16]netip.Addr{}
	for sport := uint16(40000); sport < 40020; sport++ {
		backends[sport] = wantDelivered(t, trace(t, tr, servicePacket(t, client, sigVIP4, IPProtoSCTP, sport, 132), CTNew), tunnelPort).IPDst
	}
	gone := ip("10.244.2.10")
	now := sigPort(0, "10.244.3.10", "10.244.3.11")
	_, tr = sigTracer(t, []ServicePort{now}, tr.Flows(LearnedFilter()))
	before := len(tr.Flows(LearnedFilter()))
	tr.DeleteFlows(SCTPTranslationFilter(port, netip.AddrPortFrom(gone, 9132)))
	evicted := before - len(tr.Flows(LearnedFilter()))
	moved := 0
	for sport, was := range backends {
		out := wantDelivered(t, trace(t, tr, servicePacket(t, client, sigVIP4, IPProtoSCTP, sport, 132), CTEstablished), tunnelPort)
		switch {
		case was == gone && out.IPDst == gone:
			t.Errorf("association from port %d still goes to the evicted endpoint %s", sport, gone)
		case was == gone:
			moved++
		case out.IPDst != was:
			t.Errorf("association from port %d moved from %s to %s, though its endpoint stayed", sport, was, out.IPDst)
		}
	}
	if moved == 0 || evicted != 2*moved {
		t.Errorf("%d associations moved, %d learned flows deleted: want some, and a pin and an un-NAT flow each", moved, evicted)
	}
}
