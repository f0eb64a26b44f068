package agent

import (
	"context"
	"errors"
	"net/netip"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/utils/ptr"

	"github.com/kovs-net/kovs/go-controller/pkg/ovs"
	"github.com/kovs-net/kovs/go-controller/pkg/pipeline"
)

var (
	ctVIP   = netip.MustParseAddr("10.96.0.53")
	ctEP1   = netip.MustParseAddrPort("10.244.1.10:5353")
	ctEP2   = netip.MustParseAddrPort("10.244.2.10:5353")
	ctEPold = netip.MustParseAddrPort("10.244.3.10:5353")
)

// udpPort is a UDP Service port 53 (NodePort 30053) of ClusterIP ctVIP.
func udpPort(serving ...netip.AddrPort) pipeline.ServicePort {
	return pipeline.ServicePort{Name: "x/dns:dns/UDP", ClusterIP: ctVIP, IPProto: pipeline.IPProtoUDP, Port: 53, NodePort: 30053,
		Serving: serving}
}

// ctEntry is an entry of br-int's zone from client port sport to dst, answered by reply.
func ctEntry(proto uint8, sport uint16, dst, reply netip.AddrPort) ovs.ConntrackEntry {
	client := netip.AddrPortFrom(netip.MustParseAddr("10.244.9.9"), sport)
	return ovs.ConntrackEntry{IPProto: proto, Zone: pipeline.CTZone,
		Orig: ovs.ConntrackTuple{Src: client, Dst: dst}, Reply: ovs.ConntrackTuple{Src: reply, Dst: client}}
}

// TestStaleUDPFlows is the decision kube-proxy's CleanStaleEntries makes: which entries of
// br-int's zone go after a change of a UDP Service's endpoints, and which stay.
func TestStaleUDPFlows(t *testing.T) {
	front := netip.AddrPortFrom(ctVIP, 53)
	nodePort := netip.AddrPortFrom(ctVIP, 30053)
	udp, tcp := pipeline.IPProtoUDP, pipeline.IPProtoTCP
	entries := []ovs.ConntrackEntry{
		ctEntry(udp, 1, front, ctEP1),                                          // a serving endpoint: stays
		ctEntry(udp, 2, front, ctEPold),                                        // an endpoint that left: goes
		ctEntry(udp, 3, front, ctEPold),                                        // the same pair: one flush
		ctEntry(udp, 4, front, front),                                          // began without endpoints: goes
		ctEntry(udp, 5, nodePort, ctEPold),                                     // NodePort traffic to one that left: goes
		ctEntry(udp, 6, nodePort, ctEP2),                                       // NodePort traffic to a serving one: stays
		ctEntry(tcp, 7, front, ctEPold),                                        // TCP: never (its connections end)
		ctEntry(udp, 8, netip.MustParseAddrPort("10.96.0.99:53"), ctEPold),     // not a Service's frontend
		ctEntry(udp, 9, netip.AddrPortFrom(ctVIP, 54), ctEPold),                // the ClusterIP on another port
		ctEntry(udp, 10, netip.MustParseAddrPort("10.244.3.10:5353"), ctEPold), // straight to the pod
	}
	flows := func(pairs ...[2]netip.AddrPort) []ovs.ConntrackFlows {
		var out []ovs.ConntrackFlows
		for _, p := range pairs {
			out = append(out, ovs.ConntrackFlows{Zone: pipeline.CTZone, IPProto: udp, OrigDst: p[0], ReplySrc: p[1]})
		}
		return out
	}
	for _, c := range []struct {
		name  string
		ports []pipeline.ServicePort
		want  []ovs.ConntrackFlows
	}{
		{"endpoints ep1 and ep2", []pipeline.ServicePort{udpPort(ctEP1, ctEP2)},
			flows([2]netip.AddrPort{front, front}, [2]netip.AddrPort{front, ctEPold}, [2]netip.AddrPort{nodePort, ctEPold})},
		{"no serving endpoint: every entry of the frontends", []pipeline.ServicePort{udpPort()},
			flows([2]netip.AddrPort{front, front}, [2]netip.AddrPort{front, ctEP1}, [2]netip.AddrPort{front, ctEPold},
				[2]netip.AddrPort{nodePort, ctEP2}, [2]netip.AddrPort{nodePort, ctEPold})},
		{"a TCP port of the same numbers", []pipeline.ServicePort{func() pipeline.ServicePort {
			p := udpPort()
			p.IPProto = tcp
			return p
		}()}, nil},
	} {
		got := staleUDPFlows(entries, map[string][]pipeline.ServicePort{"x/dns": c.ports})
		if !slices.Equal(got, c.want) {
			t.Errorf("%s: stale\n%v\nwant\n%v", c.name, got, c.want)
		}
	}
}

// TestServingEndpointsOfUDPPorts: a UDP port's Serving holds its serving endpoints on every
// node, terminating ones included, whatever the traffic policies; TCP ports have none.
func TestServingEndpointsOfUDPPorts(t *testing.T) {
	slice := func(proto corev1.Protocol) *discoveryv1.EndpointSlice {
		s := testSlice("dns", "a", discoveryv1.AddressTypeIPv4, 5353,
			sliceEP{"10.244.1.10", "node-1", true, true, false},
			sliceEP{"10.244.2.10", "node-2", false, true, true}, // terminating, still serving
			sliceEP{"10.244.3.10", "node-3", false, false, false})
		s.Ports[0].Protocol = ptr.To(proto)
		return s
	}
	local := corev1.ServiceInternalTrafficPolicyLocal
	svc := func(proto corev1.Protocol) *corev1.Service {
		return testService("dns", func(s *corev1.Service) {
			s.Spec.Ports[0].Protocol = proto
			s.Spec.InternalTrafficPolicy = &local
		})
	}
	ports := servicePorts(svc(corev1.ProtocolUDP), []*discoveryv1.EndpointSlice{slice(corev1.ProtocolUDP)}, proxyNode{name: "node-1"},
		newGroupAllocator().forService("x/dns"), false)
	want := []netip.AddrPort{netip.MustParseAddrPort("10.244.1.10:5353"), netip.MustParseAddrPort("10.244.2.10:5353")}
	if len(ports) != 1 || !slices.Equal(ports[0].Serving, want) {
		t.Fatalf("UDP port: %+v, want Serving %v", ports, want)
	}
	ports = servicePorts(svc(corev1.ProtocolTCP), []*discoveryv1.EndpointSlice{slice(corev1.ProtocolTCP)}, proxyNode{name: "node-1"},
		newGroupAllocator().forService("x/dns"), false)
	if len(ports) != 1 || ports[0].Serving != nil {
		t.Errorf("TCP port: Serving %v, want none", ports[0].Serving)
	}
}

// TestConntrackCleanupFollowsInstalledGenerations: a change of a UDP Service calls for a
// cleanup once its generation is installed (not before: until then the old flows would
// make the entries again), a change of TCP Services only does not, and the first sync of
// the Services does.
func TestConntrackCleanupFollowsInstalledGenerations(t *testing.T) {
	s := NewNodeState(1, nil)
	tcp := udpPort()
	tcp.Name, tcp.IPProto = "x/web:web/TCP", pipeline.IPProtoTCP
	gen := s.SetServices(map[string][]pipeline.ServicePort{"x/web": {tcp}})
	if _, due := s.TakeConntrackCleanup(gen - 1); due {
		t.Error("due before the first Services were installed")
	}
	if _, due := s.TakeConntrackCleanup(gen); !due {
		t.Error("not due after the first Services were installed")
	}
	if _, due := s.TakeConntrackCleanup(gen); due {
		t.Error("due twice")
	}
	tcp.Port = 81
	gen = s.SetService("x/web", []pipeline.ServicePort{tcp})
	if _, due := s.TakeConntrackCleanup(gen); due {
		t.Error("due after a change of a TCP Service")
	}
	gen = s.SetService("x/dns", []pipeline.ServicePort{udpPort(ctEP1)})
	later := s.SetService("x/dns", []pipeline.ServicePort{udpPort(ctEP2)})
	if _, due := s.TakeConntrackCleanup(gen); due {
		t.Errorf("due at generation %d, before generation %d that removed %s is installed", gen, later, ctEP1)
	}
	services, due := s.TakeConntrackCleanup(later)
	if !due || !slices.Equal(services["x/dns"][0].Serving, []netip.AddrPort{ctEP2}) {
		t.Errorf("after generation %d: due %v with %v", later, due, services)
	}
	s.RetryConntrackCleanup()
	if _, due := s.TakeConntrackCleanup(later); !due {
		t.Error("a failed cleanup is not due again")
	}
	gen = s.SetService("x/dns", nil) // deleted
	if _, due := s.TakeConntrackCleanup(gen); !due {
		t.Error("not due after a UDP Service was deleted")
	}
}

type fakeConntrack struct {
	entries  []ovs.ConntrackEntry
	dumpErr  error
	flushErr error
	dumps    int
	flushed  []ovs.ConntrackFlows
}

func (f *fakeConntrack) DumpConntrack(_ context.Context, zone uint16) ([]ovs.ConntrackEntry, error) {
	f.dumps++
	return f.entries, f.dumpErr
}

func (f *fakeConntrack) FlushConntrackFlows(_ context.Context, fl ovs.ConntrackFlows) error {
	f.flushed = append(f.flushed, fl)
	return f.flushErr
}

func TestDeleteStaleUDPEntries(t *testing.T) {
	ctx := context.Background()
	front := netip.AddrPortFrom(ctVIP, 53)
	stale := ctEntry(pipeline.IPProtoUDP, 1, front, ctEPold)
	udp := map[string][]pipeline.ServicePort{"x/dns": {udpPort(ctEP1)}}

	ct := &fakeConntrack{entries: []ovs.ConntrackEntry{stale, ctEntry(pipeline.IPProtoUDP, 2, front, ctEP1)}}
	if n, err := deleteStaleUDPEntries(ctx, ct, udp); n != 1 || err != nil || len(ct.flushed) != 1 || ct.flushed[0].ReplySrc != ctEPold {
		t.Errorf("flushed %d (%v): %v, want the entries answered by %s", n, err, ct.flushed, ctEPold)
	}

	tcp := udpPort()
	tcp.IPProto = pipeline.IPProtoTCP
	ct = &fakeConntrack{entries: []ovs.ConntrackEntry{stale}}
	if _, err := deleteStaleUDPEntries(ctx, ct, map[string][]pipeline.ServicePort{"x/web": {tcp}}); err != nil || ct.dumps != 0 {
		t.Errorf("without UDP Services: %d dumps (%v), want none", ct.dumps, err)
	}

	ct = &fakeConntrack{dumpErr: errors.New("ovs-appctl: no such socket")}
	if _, err := deleteStaleUDPEntries(ctx, ct, udp); err == nil || !strings.Contains(err.Error(), "no such socket") {
		t.Errorf("dump failure: %v", err)
	}
	ct = &fakeConntrack{entries: []ovs.ConntrackEntry{stale}, flushErr: errors.New("flush refused")}
	if n, err := deleteStaleUDPEntries(ctx, ct, udp); n != 0 || err == nil || !strings.Contains(err.Error(), "flush refused") {
		t.Errorf("flush failure: %d flushed, %v", n, err)
	}
}
