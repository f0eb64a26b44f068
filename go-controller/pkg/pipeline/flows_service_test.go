package pipeline

import (
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// servicePacket is what local pod sends to dst:port from source port sport.
func servicePacket(t *testing.T, pod PodPort, dst netip.Addr, proto uint8, sport, dport uint16) Packet {
	t.Helper()
	p := transportPacket(pod.OFPort, podIP(t, pod, dst.Is6()), dst, proto, dport)
	p.EthSrc, p.EthDst, p.SrcPort = pod.MAC, gwMAC(1), sport
	return p
}

// backendsReached traces n connections (source ports 40000...) and returns where each
// was delivered: "port:addr:port" after translation.
func backendsReached(t *testing.T, tr *Tracer, p Packet, n int) map[string]int {
	t.Helper()
	seen := map[string]int{}
	for i := range n {
		q := p
		q.SrcPort = uint16(40000 + i)
		r := trace(t, tr, q, CTNew)
		if len(r.Outputs) != 1 {
			t.Fatalf("connection %d not delivered:\n%s", i, r)
		}
		out := r.Outputs[0].Packet
		seen[netip.AddrPortFrom(out.IPDst, out.DstPort).String()]++
	}
	return seen
}

func TestServiceClusterIPSpreadsOverAllEndpoints(t *testing.T) {
	sc, flows, groups := serviceScenario(t)
	client := sc.pods[1]
	for _, tc := range []struct {
		vip  netip.Addr
		want []string
	}{
		{webVIP4, []string{"10.244.1.10:8080", "10.244.2.10:8080", "10.244.3.10:8080"}},
		{webVIP6, []string{"[fd00:10:244:1::a]:8080", "[fd00:10:244:2::a]:8080", "[fd00:10:244:3::a]:8080"}},
	} {
		tr := NewTracer(flows).WithGroups(groups)
		seen := backendsReached(t, tr, servicePacket(t, client, tc.vip, IPProtoTCP, 40000, 80), 60)
		for _, w := range tc.want {
			if seen[w] == 0 {
				t.Errorf("%s: endpoint %s got none of 60 connections: %v", tc.vip, w, seen)
			}
		}
		if len(seen) != len(tc.want) {
			t.Errorf("%s: connections reached %v, want only %v", tc.vip, seen, tc.want)
		}
	}
}

func TestServiceTranslationAndReply(t *testing.T) {
	sc, flows, groups := serviceScenario(t)
	client, web := sc.pods[1], sc.pods[0]
	tr := NewTracer(flows).WithGroups(groups)
	// Find a connection the group sends to the local endpoint web-1.
	var syn Packet
	for sport := uint16(40000); sport < 40100; sport++ {
		p := servicePacket(t, client, webVIP4, IPProtoTCP, sport, 80)
		r := trace(t, NewTracer(flows).WithGroups(groups), p, CTNew)
		if len(r.Outputs) == 1 && r.Outputs[0].Port == web.OFPort {
			syn = p
			break
		}
	}
	if syn.SrcPort == 0 {
		t.Fatal("no connection went to the local endpoint")
	}
	r := trace(t, tr, syn, CTNew)
	out := wantDelivered(t, r, web.OFPort)
	wantAddr(t, "translated destination", out.IPDst, ip("10.244.1.10"))
	if out.DstPort != 8080 {
		t.Errorf("translated port = %d, want 8080", out.DstPort)
	}
	wantAddr(t, "source (the client, not NATed)", out.IPSrc, ip("10.244.1.11"))
	wantTables(t, r, "Classifier", "SpoofGuard", "ConntrackZone", "ConntrackState", "ServiceLB", "EndpointDNAT",
		"ServiceHairpin", "AdminEgressPolicy", "EgressPolicy", "BaselineEgressPolicy", "L3Forwarding", "L3DecTTL",
		"AdminIngressPolicy", "IngressPolicy", "BaselineIngressPolicy", "ConntrackCommit", "Output")

	// The reply is un-NATed by the ct(nat) of ConntrackZone: it comes from the Service.
	reply := transportPacket(web.OFPort, ip("10.244.1.10"), ip("10.244.1.11"), IPProtoTCP, syn.SrcPort)
	reply.SrcPort, reply.EthSrc, reply.EthDst = 8080, web.MAC, gwMAC(1)
	rr := trace(t, tr, reply, CTEstablished|CTReply)
	back := wantDelivered(t, rr, client.OFPort)
	if got := netip.AddrPortFrom(back.IPSrc, back.SrcPort); got != ep("10.96.0.10:80") {
		t.Errorf("reply source = %s, want the Service 10.96.0.10:80:\n%s", got, rr)
	}
}

func TestServiceWithoutEndpointsGoesToTheHost(t *testing.T) {
	sc, flows, groups := serviceScenario(t)
	r := trace(t, NewTracer(flows).WithGroups(groups), servicePacket(t, sc.pods[1], emptyVIP, IPProtoTCP, 40000, 80), CTNew)
	// The host's reject rule answers with a TCP reset (docs/services.md).
	out := wantDelivered(t, r, gatewayPort)
	wantAddr(t, "destination", out.IPDst, emptyVIP)
	if len(r.NAT) != 0 {
		t.Errorf("no endpoint, yet translated: %v", r.NAT)
	}
}

func TestServiceHairpin(t *testing.T) {
	sc, flows, groups := serviceScenario(t)
	web := sc.pods[0]
	for _, vip := range []netip.Addr{webVIP4, webVIP6} {
		self := podIP(t, web, vip.Is6())
		var syn Packet
		var r Result
		for sport := uint16(40000); sport < 40100; sport++ {
			p := servicePacket(t, web, vip, IPProtoTCP, sport, 80)
			r = trace(t, NewTracer(flows).WithGroups(groups), p, CTNew)
			if len(r.NAT) > 0 && strings.HasSuffix(r.NAT[0], ">"+netip.AddrPortFrom(self, 8080).String()) {
				syn = p
				break
			}
		}
		if syn.SrcPort == 0 {
			t.Fatalf("%s: no connection went to the pod itself", vip)
		}
		tr := NewTracer(flows).WithGroups(groups)
		r = trace(t, tr, syn, CTNew)
		out := wantDelivered(t, r, web.OFPort)
		wantAddr(t, "hairpin source", out.IPSrc, hairpinAddr(ipProto(vip)))
		wantAddr(t, "hairpin destination", out.IPDst, self)

		reply := transportPacket(web.OFPort, self, out.IPSrc, IPProtoTCP, out.SrcPort)
		reply.SrcPort, reply.EthSrc, reply.EthDst = 8080, web.MAC, gwMAC(1)
		rr := trace(t, tr, reply, CTEstablished|CTReply)
		back := wantDelivered(t, rr, web.OFPort)
		if got, want := netip.AddrPortFrom(back.IPSrc, back.SrcPort), netip.AddrPortFrom(vip, 80); got != want {
			t.Errorf("hairpin reply from %s, want %s:\n%s", got, want, rr)
		}
		wantAddr(t, "hairpin reply destination", back.IPDst, self)
		if back.DstPort != syn.SrcPort {
			t.Errorf("hairpin reply to port %d, want %d", back.DstPort, syn.SrcPort)
		}
	}
}

func TestServiceSessionAffinity(t *testing.T) {
	sc, flows, groups := serviceScenario(t)
	tr := NewTracer(flows).WithGroups(groups)
	p := servicePacket(t, sc.pods[1], dnsVIP, IPProtoUDP, 40000, 53)
	seen := backendsReached(t, tr, p, 20)
	if len(seen) != 1 {
		t.Errorf("with affinity a client's connections spread over %v, want one endpoint", seen)
	}
	if len(tr.Learned()) != 1 {
		t.Errorf("learned flows: %v", tr.Learned())
	}
	tr.Expire() // the idle timeout passed: the group chooses again
	if seen := backendsReached(t, tr, p, 20); len(seen) != 1 {
		t.Errorf("after expiry: %v", seen)
	}
	// Different clients are balanced over both endpoints.
	fresh := NewTracer(flows).WithGroups(groups)
	clients := map[string]bool{}
	for i := range 40 {
		q := p
		q.IPSrc = netip.AddrFrom4([4]byte{192, 168, 7, byte(20 + i)}) // clients the host forwards
		q.InPort, q.EthSrc = gatewayPort, gwMAC(1)
		r := trace(t, fresh, q, CTNew)
		if len(r.Outputs) == 1 {
			clients[r.Outputs[0].Packet.IPDst.String()] = true
		}
	}
	if len(clients) != 2 {
		t.Errorf("40 clients reached %v, want both endpoints", clients)
	}
}

func TestServiceNodePort(t *testing.T) {
	_, flows, groups := serviceScenario(t)
	fromOtherNode := func(vip netip.Addr, port uint16, sport uint16) Packet {
		p := transportPacket(gatewayPort, ip("172.31.0.2"), vip, IPProtoTCP, port)
		p.EthSrc, p.EthDst, p.SrcPort = gwMAC(1), mac("0a:58:0a:f4:01:fe"), sport
		return p
	}
	// externalTrafficPolicy Cluster: all endpoints.
	tr := NewTracer(flows).WithGroups(groups)
	seen := map[string]int{}
	for i := range 60 {
		r := trace(t, tr, fromOtherNode(webVIP4, 30080, uint16(41000+i)), CTNew)
		if len(r.Outputs) != 1 {
			t.Fatalf("NodePort connection not delivered:\n%s", r)
		}
		o := r.Outputs[0].Packet
		seen[netip.AddrPortFrom(o.IPDst, o.DstPort).String()]++
		wantAddr(t, "client source kept in OVS", o.IPSrc, ip("172.31.0.2"))
	}
	if len(seen) != 3 {
		t.Errorf("NodePort (Cluster) reached %v, want all three endpoints", seen)
	}
	// externalTrafficPolicy Local: only the local endpoint; the ClusterIP still balances
	// over both.
	for i := range 20 {
		r := trace(t, NewTracer(flows).WithGroups(groups), fromOtherNode(localVIP, 30090, uint16(42000+i)), CTNew)
		o := wantDelivered(t, r, 3)
		wantAddr(t, "local endpoint", o.IPDst, ip("10.244.1.10"))
	}
}

func TestServiceGolden(t *testing.T) {
	sc, flows, groups := serviceScenario(t)
	var b strings.Builder
	b.WriteString("# kovs br-int flows and groups, reference scenario: " + sc.title + "\n")
	b.WriteString("# Generated by: go test ./go-controller/pkg/pipeline -update   (do not edit by hand)\n")
	b.WriteString("# Load (an ovs-ofctl bundle file: groups first): ovs-ofctl -O OpenFlow15 bundle br-int " + sc.name + ".bundle\n")
	b.WriteString("# Services: see service_scenario_test.go.\n\n")
	for _, g := range groups {
		b.WriteString("group add " + g.String() + "\n")
	}
	for _, line := range strings.Split(FormatByTable(flows), "\n") {
		switch {
		case line == "" || strings.HasPrefix(line, "#"):
			b.WriteString(line + "\n")
		default:
			b.WriteString("flow add " + line + "\n")
		}
	}
	got := b.String()
	path := filepath.Join(goldenDir, sc.name+".bundle")
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("read golden (run with -update to create it): %v", err)
	}
	if got != string(want) {
		t.Errorf("flows differ from %s (rerun with -update if intended):\n%s", path, lineDiff(string(want), got))
	}
}

// TestServicePolicyAfterTranslation: NetworkPolicy holds through a ClusterIP. x/a is
// isolated for ingress and admits only s-clients (x/b, not y/c) on TCP 80; a Service
// 10.96.0.40:80 -> x/a:80 admits exactly who x/a admits directly, and the backend's rules
// see the client's own address.
func TestServicePolicyAfterTranslation(t *testing.T) {
	sc := policyScenario()
	flows := sc.flows(t)
	b, err := NewBuilder(sc.node, testRound)
	if err != nil {
		t.Fatal(err)
	}
	vip := ip("10.96.0.40")
	g := ServiceGroup{ID: ServiceGroupBase | 9, Endpoints: []netip.AddrPort{ep("10.244.1.10:80")}}
	svcFlows, groups, err := b.ServiceFlows([]ServicePort{{Name: "x/a:http/TCP", ClusterIP: vip, IPProto: IPProtoTCP, Port: 80,
		Internal: g, External: g}}, sc.pods)
	if err != nil {
		t.Fatal(err)
	}
	tr := NewTracer(append(flows, svcFlows...)).WithGroups(groups)
	a, bPod, c := sc.pods[0], sc.pods[1], sc.pods[2]
	for _, tc := range []struct {
		client PodPort
		allow  bool
	}{{bPod, true}, {c, false}} {
		direct := trace(t, tr, servicePacket(t, tc.client, ip("10.244.1.10"), IPProtoTCP, 41000, 80), CTNew)
		viaVIP := trace(t, tr, servicePacket(t, tc.client, vip, IPProtoTCP, 41001, 80), CTNew)
		for what, r := range map[string]Result{"direct": direct, "through the ClusterIP": viaVIP} {
			if got := len(r.Outputs) == 1; got != tc.allow {
				t.Errorf("%s -> x/a %s: delivered=%v, want %v:\n%s", tc.client, what, got, tc.allow, r)
			}
		}
		if tc.allow {
			out := wantDelivered(t, viaVIP, a.OFPort)
			wantAddr(t, "source the backend sees", out.IPSrc, podIP(t, tc.client, false))
		} else {
			wantDropped(t, viaVIP, IngressPolicy)
		}
	}
}

// TestGatewayBypassOnlyForNodeAddresses: what the host sends to its pods skips ingress
// policy only from the node's own addresses; forwarded traffic with another source (a
// NodePort client kept by externalTrafficPolicy Local, kube-proxy's DNAT) meets it.
func TestGatewayBypassOnlyForNodeAddresses(t *testing.T) {
	sc := policyScenario()
	tr := NewTracer(sc.flows(t))
	a := sc.pods[0] // isolated for ingress: TCP 81 is admitted from no one
	for _, tc := range []struct {
		src   netip.Addr
		allow bool
	}{{ip("10.244.1.1"), true}, {ip("172.31.0.1"), true}, {ip("172.31.0.2"), false}, {ip("192.168.7.7"), false}} {
		r := trace(t, tr, fromNode(tc.src, a, ip("10.244.1.10"), 81), CTNew)
		if got := len(r.Outputs) == 1; got != tc.allow {
			t.Errorf("from the gateway port with source %s: delivered=%v, want %v:\n%s", tc.src, got, tc.allow, r)
		}
	}
}

// TestRepliesOfHostForwardedConnectionsReturnToTheHost: with --service-proxy=none,
// kube-proxy on the host DNATs a pod's connection to a ClusterIP and forwards it into
// br-int from the gateway port, with the client pod as source. The backend's reply must go
// back to the host (which un-DNATs it), not straight to the client pod.
func TestRepliesOfHostForwardedConnectionsReturnToTheHost(t *testing.T) {
	sc := oneNodeTwoPods()
	tr := NewTracer(sc.flows(t))
	web, client := sc.pods[0], sc.pods[1]
	// The client's SYN to the ClusterIP goes to the host (no Service flows).
	r := trace(t, tr, servicePacket(t, client, ip("10.96.0.10"), IPProtoTCP, 43000, 80), CTNew)
	wantDelivered(t, r, gatewayPort)
	// kube-proxy sends it back in, translated to the backend web.
	in := transportPacket(gatewayPort, ip("10.244.1.11"), ip("10.244.1.10"), IPProtoTCP, 8080)
	in.SrcPort, in.EthSrc, in.EthDst = 43000, gwMAC(1), web.MAC
	r = trace(t, tr, in, CTNew)
	wantDelivered(t, r, web.OFPort)
	// The reply goes to the host, not to the client.
	reply := transportPacket(web.OFPort, ip("10.244.1.10"), ip("10.244.1.11"), IPProtoTCP, 43000)
	reply.SrcPort, reply.EthSrc, reply.EthDst = 8080, web.MAC, gwMAC(1)
	r = trace(t, tr, reply, CTEstablished|CTReply)
	wantDelivered(t, r, gatewayPort)
	// A reply of the pod's own connection to its peer still goes straight to it.
	direct := trace(t, tr, servicePacket(t, client, ip("10.244.1.10"), IPProtoTCP, 43001, 8080), CTNew)
	wantDelivered(t, direct, web.OFPort)
	back := transportPacket(web.OFPort, ip("10.244.1.10"), ip("10.244.1.11"), IPProtoTCP, 43001)
	back.SrcPort, back.EthSrc, back.EthDst = 8080, web.MAC, gwMAC(1)
	wantDelivered(t, trace(t, tr, back, CTEstablished|CTReply), client.OFPort)
}

// TestServiceFlowInvariants: the Service flows keep the pipeline's invariants (forward
// jumps but the hairpin reply's recirculation, terminal actions last, owned cookies, no
// two flows with one table, priority and match), and every group a flow uses exists.
func TestServiceFlowInvariants(t *testing.T) {
	_, flows, groups := serviceScenario(t)
	seen := map[string]bool{}
	ids := map[uint32]bool{}
	for _, g := range groups {
		ids[g.ID] = true
	}
	for _, f := range flows {
		checkJumps(t, f)
		if !f.Cookie.Owned() || f.Cookie.Round() != testRound {
			t.Errorf("cookie %s of %s", f.Cookie, f)
		}
		key := fmt.Sprintf("%d/%d/%s", f.Table.ID, f.Priority, f.Match)
		if seen[key] {
			t.Errorf("two flows with table/priority/match %s", key)
		}
		seen[key] = true
		for _, a := range f.Actions {
			if g, ok := a.(GroupOutput); ok && !ids[g.ID] {
				t.Errorf("%s: group %d is not installed", f, g.ID)
			}
		}
	}
}

// TestServiceLocalPoliciesWithoutLocalEndpoints: externalTrafficPolicy Local without a
// local endpoint drops NodePort traffic, and internalTrafficPolicy Local with endpoints
// only elsewhere drops ClusterIP traffic, in ServiceLB (kube-proxy drops both).
func TestServiceLocalPoliciesWithoutLocalEndpoints(t *testing.T) {
	sc := oneNodeTwoPods()
	b, err := NewBuilder(sc.node, testRound)
	if err != nil {
		t.Fatal(err)
	}
	none := ServiceGroup{ID: ServiceGroupBase | 2}
	vip := ip("10.96.0.50")
	svcFlows, groups, err := b.ServiceFlows([]ServicePort{{Name: "x/local:http/TCP", ClusterIP: vip, IPProto: IPProtoTCP, Port: 80,
		NodePort: 30050, Internal: none, External: none, DropWithoutEndpoints: true, ExternalLocal: true}}, sc.pods)
	if err != nil {
		t.Fatal(err)
	}
	tr := NewTracer(append(sc.flows(t), svcFlows...)).WithGroups(groups)
	wantDropped(t, trace(t, tr, servicePacket(t, sc.pods[1], vip, IPProtoTCP, 40000, 80), CTNew), ServiceLB)
	np := transportPacket(gatewayPort, ip("172.31.0.9"), vip, IPProtoTCP, 30050)
	np.EthSrc, np.SrcPort = gwMAC(1), 40000
	wantDropped(t, trace(t, tr, np, CTNew), ServiceLB)
}

// TestServiceHairpinIgnoresPolicy: a pod reaching itself through its Service is allowed
// whatever NetworkPolicy isolates it (upstream: a pod can always reach itself), in both
// directions: x/a is isolated for ingress and egress in the policy scenario.
func TestServiceHairpinIgnoresPolicy(t *testing.T) {
	sc := policyScenario()
	b, err := NewBuilder(sc.node, testRound)
	if err != nil {
		t.Fatal(err)
	}
	vip := ip("10.96.0.41")
	g := ServiceGroup{ID: ServiceGroupBase | 9, Endpoints: []netip.AddrPort{ep("10.244.1.10:81")}}
	svcFlows, groups, err := b.ServiceFlows([]ServicePort{{Name: "x/a:p/TCP", ClusterIP: vip, IPProto: IPProtoTCP, Port: 81,
		Internal: g, External: g}}, sc.pods)
	if err != nil {
		t.Fatal(err)
	}
	tr := NewTracer(append(sc.flows(t), svcFlows...)).WithGroups(groups)
	a := sc.pods[0]
	// Without the Service x/a may not send to itself on TCP 81 through br-int ...
	wantDropped(t, trace(t, tr, servicePacket(t, a, ip("10.244.1.10"), IPProtoTCP, 41000, 81), CTNew), EgressPolicy)
	// ... through it, it reaches itself.
	out := wantDelivered(t, trace(t, tr, servicePacket(t, a, vip, IPProtoTCP, 41001, 81), CTNew), a.OFPort)
	wantAddr(t, "hairpin source", out.IPSrc, HairpinSNATv4)
}

// TestServiceFlowCount: per Service port (no NodePort, no affinity) one ServiceLB flow,
// one ServiceLB flow for the fragments to its ClusterIP, one EndpointDNAT flow per
// endpoint and one group with a bucket per endpoint, so 1,000 Services of 10 endpoints
// are 12,000 flows and 1,000 groups (plus the node's own hairpin flows; no endpoint is
// local, so no pod's).
func TestServiceFlowCount(t *testing.T) {
	sc := oneNodeTwoPods()
	b, err := NewBuilder(sc.node, testRound)
	if err != nil {
		t.Fatal(err)
	}
	const services, endpoints = 1000, 10
	var ports []ServicePort
	for i := range services {
		g := ServiceGroup{ID: ServiceGroupBase | uint32(i+1)}
		for e := range endpoints {
			g.Endpoints = append(g.Endpoints, netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, 244, byte(2 + e), byte(i % 250)}), uint16(8000+i/250)))
		}
		ports = append(ports, ServicePort{Name: fmt.Sprintf("ns/svc-%d:http/TCP", i), IPProto: IPProtoTCP, Port: 80,
			ClusterIP: netip.AddrFrom4([4]byte{10, 96, byte(i / 250), byte(1 + i%250)}), Internal: g, External: g})
	}
	flows, groups, err := b.ServiceFlows(ports, sc.pods)
	if err != nil {
		t.Fatal(err)
	}
	// Per family ConntrackZone, HairpinUnSNAT and IngressPolicy; per node address the
	// host's own hairpin (ServiceHairpin, ConntrackState).
	hairpin := 3*len(b.families()) + 2*len(b.nodeAddresses())
	if want := services*(2+endpoints) + hairpin; len(flows) != want {
		t.Errorf("%d flows, want %d", len(flows), want)
	}
	if len(groups) != services || len(groups[0].Buckets) != endpoints {
		t.Errorf("%d groups of %d buckets, want %d of %d", len(groups), len(groups[0].Buckets), services, endpoints)
	}
	text := 0
	for _, f := range flows {
		text += len(f.String())
	}
	for _, g := range groups {
		text += len(g.String())
	}
	t.Logf("%d Services x %d endpoints: %d flows, %d groups, %d bytes of bundle text", services, endpoints, len(flows), len(groups), text)
}

// TestHostToServiceWithHostNetworkEndpoint: the node connects to a ClusterIP whose
// endpoint is another node's address (a host-network pod): after the translation br-int
// hands the packet back to the host, which routes it.
func TestHostToServiceWithHostNetworkEndpoint(t *testing.T) {
	sc := oneNodeTwoPods()
	b, err := NewBuilder(sc.node, testRound)
	if err != nil {
		t.Fatal(err)
	}
	vip := ip("10.96.0.60")
	g := ServiceGroup{ID: ServiceGroupBase | 1, Endpoints: []netip.AddrPort{ep("172.31.0.3:80")}}
	svcFlows, groups, err := b.ServiceFlows([]ServicePort{{Name: "x/hn:http/TCP", ClusterIP: vip, IPProto: IPProtoTCP, Port: 80,
		Internal: g, External: g}}, sc.pods)
	if err != nil {
		t.Fatal(err)
	}
	tr := NewTracer(append(sc.flows(t), svcFlows...)).WithGroups(groups)
	p := transportPacket(gatewayPort, ip("10.244.1.1"), vip, IPProtoTCP, 80)
	p.EthSrc, p.SrcPort = gwMAC(1), 45000
	r := trace(t, tr, p, CTNew)
	out := wantDelivered(t, r, gatewayPort)
	if got := netip.AddrPortFrom(out.IPDst, out.DstPort); got != ep("172.31.0.3:80") {
		t.Errorf("handed back to the host for %s, want the endpoint 172.31.0.3:80:\n%s", got, r)
	}
	// Without a translation, what the host sends to an unknown address is still dropped.
	p.IPDst = ip("10.96.0.61")
	if r := trace(t, tr, p, CTNew); !r.Dropped() {
		t.Errorf("untranslated packet from the host went back to it:\n%s", r)
	}
}

// TestHostHairpinThroughService: the node connects to a ClusterIP whose endpoint is its
// own address (a host-network pod on this node): br-int SNATs it to the hairpin address
// and hands it back; the host's answer comes back through br-int, which returns it from
// the ClusterIP.
func TestHostHairpinThroughService(t *testing.T) {
	sc := oneNodeTwoPods()
	b, err := NewBuilder(sc.node, testRound)
	if err != nil {
		t.Fatal(err)
	}
	vip := ip("10.96.0.70")
	g := ServiceGroup{ID: ServiceGroupBase | 1, Endpoints: []netip.AddrPort{ep("172.31.0.1:80")}}
	svcFlows, groups, err := b.ServiceFlows([]ServicePort{{Name: "x/hn:http/TCP", ClusterIP: vip, IPProto: IPProtoTCP, Port: 80,
		Internal: g, External: g}}, sc.pods)
	if err != nil {
		t.Fatal(err)
	}
	tr := NewTracer(append(sc.flows(t), svcFlows...)).WithGroups(groups)
	syn := transportPacket(gatewayPort, ip("10.244.1.1"), vip, IPProtoTCP, 80)
	syn.EthSrc, syn.SrcPort = gwMAC(1), 45000
	out := wantDelivered(t, trace(t, tr, syn, CTNew), gatewayPort)
	if got := netip.AddrPortFrom(out.IPDst, out.DstPort); got != ep("172.31.0.1:80") || out.IPSrc != HairpinSNATv4 {
		t.Fatalf("handed back as %s>%s, want %s>172.31.0.1:80", out.IPSrc, got, HairpinSNATv4)
	}
	reply := transportPacket(gatewayPort, ip("172.31.0.1"), HairpinSNATv4, IPProtoTCP, out.SrcPort)
	reply.EthSrc, reply.SrcPort = gwMAC(1), 80
	r := trace(t, tr, reply, CTEstablished|CTReply)
	back := wantDelivered(t, r, gatewayPort)
	if got := netip.AddrPortFrom(back.IPSrc, back.SrcPort); got != netip.AddrPortFrom(vip, 80) || back.IPDst != ip("10.244.1.1") || back.DstPort != 45000 {
		t.Errorf("answer %s>%s, want %s:80>10.244.1.1:45000:\n%s", got, netip.AddrPortFrom(back.IPDst, back.DstPort), vip, r)
	}
}

// TestServiceExternalIPs: a pod's new connection to one of a Service's externalIPs on the
// Service's port is balanced over every endpoint of the cluster (Cluster), even with
// internalTrafficPolicy Local, as kube-proxy sends a pod's traffic to an external IP; the
// reply comes from the external IP. Without endpoints it goes to the host untranslated
// (which rejects it), and another port of the external IP is no Service's.
func TestServiceExternalIPs(t *testing.T) {
	sc := threeNodesDualStack(1)
	vip, ext := ip("10.96.0.60"), ip("203.0.113.250")
	local := ServiceGroup{ID: ServiceGroupBase | 1, Endpoints: []netip.AddrPort{ep("10.244.1.10:9376")}}
	cluster := ServiceGroup{ID: ServiceGroupBase | 2, Endpoints: []netip.AddrPort{ep("10.244.1.10:9376"), ep("10.244.2.10:9376")}}
	none := ServiceGroup{ID: ServiceGroupBase | 3}
	flows, groups := withServices(t, sc, []ServicePort{
		{Name: "x/ext:http/TCP", ClusterIP: vip, IPProto: IPProtoTCP, Port: 80, Internal: local, External: local,
			ExternalIPs: []netip.Addr{ext}, Cluster: cluster},
		{Name: "x/none:http/TCP", ClusterIP: ip("10.96.0.61"), IPProto: IPProtoTCP, Port: 81, Internal: none, External: none,
			ExternalIPs: []netip.Addr{ext}, Cluster: none},
	})
	client := sc.pods[1]
	tr := NewTracer(flows).WithGroups(groups)
	seen := backendsReached(t, tr, servicePacket(t, client, ext, IPProtoTCP, 40000, 80), 60)
	if len(seen) != 2 || seen["10.244.1.10:9376"] == 0 || seen["10.244.2.10:9376"] == 0 {
		t.Errorf("connections to %s:80 reached %v, want both endpoints of the cluster", ext, seen)
	}
	seen = backendsReached(t, NewTracer(flows).WithGroups(groups), servicePacket(t, client, vip, IPProtoTCP, 40000, 80), 20)
	if len(seen) != 1 || seen["10.244.1.10:9376"] == 0 {
		t.Errorf("connections to the ClusterIP reached %v, want only the local endpoint (internalTrafficPolicy Local)", seen)
	}

	// The reply, from the local endpoint, is un-NATed to the external IP.
	var syn Packet
	for sport := uint16(40000); sport < 40100 && syn.SrcPort == 0; sport++ {
		p := servicePacket(t, client, ext, IPProtoTCP, sport, 80)
		if r := trace(t, NewTracer(flows).WithGroups(groups), p, CTNew); len(r.Outputs) == 1 && r.Outputs[0].Port == sc.pods[0].OFPort {
			syn = p
		}
	}
	if syn.SrcPort == 0 {
		t.Fatal("no connection to the external IP went to the local endpoint")
	}
	trace(t, tr, syn, CTNew)
	reply := transportPacket(sc.pods[0].OFPort, ip("10.244.1.10"), podIP(t, client, false), IPProtoTCP, syn.SrcPort)
	reply.SrcPort, reply.EthSrc, reply.EthDst = 9376, sc.pods[0].MAC, gwMAC(1)
	back := wantDelivered(t, trace(t, tr, reply, CTEstablished|CTReply), client.OFPort)
	if got := netip.AddrPortFrom(back.IPSrc, back.SrcPort); got != netip.AddrPortFrom(ext, 80) {
		t.Errorf("reply source = %s, want the external IP %s:80", got, ext)
	}

	for _, port := range []uint16{81, 82} { // no endpoints; no Service port
		r := trace(t, NewTracer(flows).WithGroups(groups), servicePacket(t, client, ext, IPProtoTCP, 40000, port), CTNew)
		out := wantDelivered(t, r, gatewayPort)
		if len(r.NAT) != 0 || out.IPDst != ext {
			t.Errorf("%s:%d: translated %v to %s, want to the host untranslated", ext, port, r.NAT, out.IPDst)
		}
	}
}

// TestServiceNodePortLocalShortCircuit: with externalTrafficPolicy Local, NodePort
// traffic of another host's client goes only to the node's own endpoints (none here:
// dropped), while a connection from the cluster's pods or from the node itself (from its
// own address, kept) goes to every endpoint of the cluster, as kube-proxy short-circuits
// it.
func TestServiceNodePortLocalShortCircuit(t *testing.T) {
	sc := threeNodesDualStack(1)
	vip := ip("10.96.0.70")
	remote := ServiceGroup{ID: ServiceGroupBase | 1, Endpoints: []netip.AddrPort{ep("10.244.2.10:8080"), ep("10.244.3.10:8080")}}
	flows, groups := withServices(t, sc, []ServicePort{{Name: "x/local:http/TCP", ClusterIP: vip, IPProto: IPProtoTCP, Port: 80,
		NodePort: 30070, Internal: remote, External: ServiceGroup{ID: ServiceGroupBase | 2}, ExternalLocal: true, Cluster: remote}})
	nodePort := func(src netip.Addr) Packet {
		p := transportPacket(gatewayPort, src, vip, IPProtoTCP, 30070)
		p.EthSrc, p.SrcPort = gwMAC(1), 40000
		return p
	}
	wantDropped(t, trace(t, NewTracer(flows).WithGroups(groups), nodePort(ip("172.31.0.9")), CTNew), ServiceLB)
	for _, src := range []netip.Addr{ip("172.31.0.1"), ip("10.244.1.11"), ip("10.244.3.20")} { // the node itself, pods
		seen := backendsReached(t, NewTracer(flows).WithGroups(groups), nodePort(src), 40)
		if len(seen) != 2 || seen["10.244.2.10:8080"] == 0 || seen["10.244.3.10:8080"] == 0 {
			t.Errorf("from %s: NodePort connections reached %v, want every endpoint of the cluster", src, seen)
		}
	}
}

// TestRepliesToAPeersHostGoBackThroughTheTunnel: a local pod's reply to another node's
// address returns through the tunnel to that node (whose br-int may have translated the
// connection: its node's own connection to an externalTrafficPolicy Local NodePort), while
// a new connection of the pod to that address leaves through the gateway as before.
func TestRepliesToAPeersHostGoBackThroughTheTunnel(t *testing.T) {
	sc := threeNodesDualStack(1)
	flows, groups := withServices(t, sc, nil)
	web := sc.pods[0]
	p := transportPacket(web.OFPort, ip("10.244.1.10"), ip("172.31.0.2"), IPProtoTCP, 40000)
	p.SrcPort, p.EthSrc, p.EthDst = 8080, web.MAC, gwMAC(1)
	r := trace(t, NewTracer(flows).WithGroups(groups), p, CTEstablished|CTReply)
	out := wantDelivered(t, r, tunnelPort)
	if out.TunDst != ip("172.31.0.2") {
		t.Errorf("reply to node-2's address tunnelled to %s, want node-2 (172.31.0.2):\n%s", out.TunDst, r)
	}
	wantDelivered(t, trace(t, NewTracer(flows).WithGroups(groups), p, CTNew), gatewayPort)
}
