package pipeline

import (
	"net/netip"
	"slices"
	"testing"
)

// fragments are the first and a later fragment of p, as OpenFlow sees them after
// ConntrackZone's ct() on the userspace datapath: the first with its ports (which
// OpenFlow matches as 0), the later one without.
func fragments(p Packet) []Packet {
	first, later := p, p
	first.Frag = FragAny
	later.Frag, later.SrcPort, later.DstPort = FragAny|FragLater, 0, 0
	return []Packet{first, later}
}

// wantTranslatedTo traces p as a new connection and fails unless it leaves translated to
// one of endpoints (the address; a later fragment has no port to translate).
func wantTranslatedTo(t *testing.T, tr *Tracer, what string, p Packet, endpoints ...string) {
	t.Helper()
	r := trace(t, tr, p, CTNew)
	if len(r.Outputs) != 1 || len(r.NAT) == 0 {
		t.Errorf("%s: not translated to an endpoint:\n%s", what, r)
		return
	}
	got := r.Outputs[0].Packet.IPDst.String()
	if !slices.Contains(endpoints, got) {
		t.Errorf("%s: translated to %s, want one of %v:\n%s", what, got, endpoints, r)
	}
}

// Fragments of a new connection to a ClusterIP (a 2,000-byte UDP datagram, say) go where
// the port's flow sends its unfragmented packets, although OpenFlow sees no port in
// them: every ClusterIP of the scenario with one port per protocol, from a pod and from
// the host (NodePort traffic comes from the gateway with the ClusterIP as destination).
func TestServiceFragmentsReachAnEndpoint(t *testing.T) {
	sc, flows, groups := serviceScenario(t)
	client := sc.pods[1]
	web := []string{"10.244.1.10", "10.244.2.10", "10.244.3.10"}
	web6 := []string{"fd00:10:244:1::a", "fd00:10:244:2::a", "fd00:10:244:3::a"}
	fromHost := func(vip netip.Addr, proto uint8, port uint16) Packet {
		p := transportPacket(gatewayPort, ip("172.31.0.2"), vip, proto, port)
		p.EthSrc, p.EthDst, p.SrcPort = gwMAC(1), mac("0a:58:0a:f4:01:fe"), 41000
		return p
	}
	for _, tc := range []struct {
		what      string
		p         Packet
		endpoints []string
	}{
		{"UDP (affinity) to the ClusterIP", servicePacket(t, client, dnsVIP, IPProtoUDP, 40000, 53), []string{"10.244.2.10", "10.244.3.10"}},
		{"TCP to the ClusterIP", servicePacket(t, client, webVIP4, IPProtoTCP, 40000, 80), web},
		{"TCP to the IPv6 ClusterIP", servicePacket(t, client, webVIP6, IPProtoTCP, 40000, 80), web6},
		{"NodePort from the host", fromHost(webVIP4, IPProtoTCP, 30080), web},
		{"ClusterIP from the host", fromHost(webVIP4, IPProtoTCP, 80), web},
	} {
		for i, frag := range fragments(tc.p) {
			wantTranslatedTo(t, NewTracer(flows).WithGroups(groups), tc.what+[]string{" (first fragment)", " (later fragment)"}[i], frag, tc.endpoints...)
		}
	}
	// externalTrafficPolicy Local: from the host, a fragment may be for the NodePort (the
	// local endpoint only) or the ClusterIP port (both): it is not guessed.
	for _, frag := range fragments(fromHost(localVIP, IPProtoTCP, 30090)) {
		if r := trace(t, NewTracer(flows).WithGroups(groups), frag, CTNew); len(r.NAT) != 0 {
			t.Errorf("fragment to a ClusterIP whose NodePort and port balance differently was translated:\n%s", r)
		}
	}
	// From a pod only the ClusterIP port is possible.
	for _, frag := range fragments(servicePacket(t, client, localVIP, IPProtoTCP, 40000, 80)) {
		wantTranslatedTo(t, NewTracer(flows).WithGroups(groups), "pod to an etp=Local ClusterIP", frag, "10.244.1.10", "10.244.2.10")
	}
}

// A ClusterIP with two UDP ports balanced by different groups: a fragment's port cannot
// be told, so its fragments are left to miss, never sent to the other port's endpoints;
// the unfragmented packets still reach their own port's endpoints.
func TestServiceFragmentsOfAmbiguousPortsAreNotGuessed(t *testing.T) {
	sc := threeNodesDualStack(1)
	vip := ip("10.96.0.77")
	a := ServiceGroup{ID: ServiceGroupBase | 21, Endpoints: []netip.AddrPort{ep("10.244.2.10:5000")}}
	b := ServiceGroup{ID: ServiceGroupBase | 22, Endpoints: []netip.AddrPort{ep("10.244.3.10:6000")}}
	flows, groups := withServices(t, sc, []ServicePort{
		{Name: "default/two:a/UDP", ClusterIP: vip, IPProto: IPProtoUDP, Port: 50, Internal: a, External: a},
		{Name: "default/two:b/UDP", ClusterIP: vip, IPProto: IPProtoUDP, Port: 60, Internal: b, External: b},
	})
	client := sc.pods[1]
	for _, frag := range fragments(servicePacket(t, client, vip, IPProtoUDP, 40000, 50)) {
		if r := trace(t, NewTracer(flows).WithGroups(groups), frag, CTNew); len(r.NAT) != 0 {
			t.Errorf("fragment of an ambiguous port translated:\n%s", r)
		}
	}
	wantTranslatedTo(t, NewTracer(flows).WithGroups(groups), "port a", servicePacket(t, client, vip, IPProtoUDP, 40000, 50), "10.244.2.10")
	wantTranslatedTo(t, NewTracer(flows).WithGroups(groups), "port b", servicePacket(t, client, vip, IPProtoUDP, 40000, 60), "10.244.3.10")
}

// An IPv6 UDP port with session affinity: OpenFlow sees a later fragment's nw_proto as 44,
// so neither the ServiceLB flow nor the endpoint's translation may need udp6 for it.
func TestServiceFragmentsIPv6Affinity(t *testing.T) {
	sc := threeNodesDualStack(1)
	vip := ip("fd00:10:96::35")
	g := ServiceGroup{ID: ServiceGroupBase | 31, Endpoints: []netip.AddrPort{ep("[fd00:10:244:2::a]:5353"), ep("[fd00:10:244:3::a]:5353")}}
	flows, groups := withServices(t, sc, []ServicePort{
		{Name: "default/dns6:dns/UDP", ClusterIP: vip, IPProto: IPProtoUDP, Port: 53, Internal: g, External: g, AffinityTimeout: 60},
	})
	p := servicePacket(t, sc.pods[1], vip, IPProtoUDP, 40000, 53)
	for i, frag := range append(fragments(p), p) {
		wantTranslatedTo(t, NewTracer(flows).WithGroups(groups), []string{"first fragment", "later fragment", "whole datagram"}[i], frag,
			"fd00:10:244:2::a", "fd00:10:244:3::a")
	}
}
