package agent

import (
	"context"
	"fmt"
	"maps"
	"net/netip"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/kovs-net/kovs/go-controller/pkg/ovs"
	"github.com/kovs-net/kovs/go-controller/pkg/ovs/ovsfake"
	"github.com/kovs-net/kovs/go-controller/pkg/pipeline"
)

type sliceEP struct {
	ip                          string
	node                        string
	ready, serving, terminating bool
}

func testSlice(svc, name string, family discoveryv1.AddressType, port int32, eps ...sliceEP) *discoveryv1.EndpointSlice {
	s := &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Namespace: "x", Name: name, Labels: map[string]string{discoveryv1.LabelServiceName: svc}},
		AddressType: family,
		Ports:       []discoveryv1.EndpointPort{{Name: ptr.To("web"), Port: ptr.To(port), Protocol: ptr.To(corev1.ProtocolTCP)}},
	}
	for _, e := range eps {
		s.Endpoints = append(s.Endpoints, discoveryv1.Endpoint{Addresses: []string{e.ip}, NodeName: ptr.To(e.node),
			Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(e.ready), Serving: ptr.To(e.serving), Terminating: ptr.To(e.terminating)}})
	}
	return s
}

func testService(name string, mutate func(*corev1.Service)) *corev1.Service {
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "x", Name: name}, Spec: corev1.ServiceSpec{
		Type: corev1.ServiceTypeClusterIP, ClusterIPs: []string{"10.96.0.10"},
		Ports: []corev1.ServicePort{{Name: "web", Port: 80, Protocol: corev1.ProtocolTCP}},
	}}
	if mutate != nil {
		mutate(svc)
	}
	return svc
}

func eps(ports []pipeline.ServicePort, i int, external bool) []string {
	g := ports[i].Internal
	if external {
		g = ports[i].External
	}
	var out []string
	for _, e := range g.Endpoints {
		out = append(out, e.String())
	}
	return out
}

func TestServicePortsFromEndpointSlices(t *testing.T) {
	ids := newGroupAllocator().forService("x/web")
	ready := func(ip, node string) sliceEP { return sliceEP{ip, node, true, true, false} }
	// Named targetPort: each slice carries the number its pods gave "web".
	all := []*discoveryv1.EndpointSlice{
		testSlice("web", "a", discoveryv1.AddressTypeIPv4, 8080, ready("10.244.1.10", "node-1"), ready("10.244.2.10", "node-2"),
			sliceEP{"10.244.2.11", "node-2", false, false, false}),
		testSlice("web", "b", discoveryv1.AddressTypeIPv4, 9090, ready("10.244.3.10", "node-3")),
		testSlice("web", "c", discoveryv1.AddressTypeIPv6, 8080, ready("fd00::1", "node-1")),
	}
	ports := servicePorts(testService("web", nil), all, proxyNode{name: "node-1"}, ids, false)
	if len(ports) != 1 {
		t.Fatalf("ports: %+v", ports)
	}
	if got, want := eps(ports, 0, false), []string{"10.244.1.10:8080", "10.244.2.10:8080", "10.244.3.10:9090"}; !slices.Equal(got, want) {
		t.Errorf("endpoints %v, want %v (not-ready left out, named port resolved per slice)", got, want)
	}
	if ports[0].Name != "x/web:web/TCP" || ports[0].NodePort != 0 || ports[0].AffinityTimeout != 0 {
		t.Errorf("port: %+v", ports[0])
	}

	// internalTrafficPolicy Local, NodePort with externalTrafficPolicy Local, affinity,
	// dual-stack, and an SCTP port (stateless on the userspace datapath).
	local := testService("web", func(s *corev1.Service) {
		s.Spec.Type = corev1.ServiceTypeNodePort
		s.Spec.ClusterIPs = []string{"10.96.0.10", "fd00:10:96::a"}
		s.Spec.InternalTrafficPolicy = ptr.To(corev1.ServiceInternalTrafficPolicyLocal)
		s.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal
		s.Spec.Ports[0].NodePort = 30080
		s.Spec.Ports = append(s.Spec.Ports, corev1.ServicePort{Name: "s", Port: 9, Protocol: corev1.ProtocolSCTP, NodePort: 30009})
		s.Spec.SessionAffinity = corev1.ServiceAffinityClientIP
		s.Spec.SessionAffinityConfig = &corev1.SessionAffinityConfig{ClientIP: &corev1.ClientIPConfig{TimeoutSeconds: ptr.To[int32](86400)}}
	})
	ports = servicePorts(local, all, proxyNode{name: "node-2"}, ids, false)
	if len(ports) != 4 || !ports[2].ClusterIP.Is6() {
		t.Fatalf("want two ports of each family, got %+v", ports)
	}
	if sctp := ports[1]; sctp.IPProto != pipeline.IPProtoSCTP || !sctp.Stateless || sctp.NodePort != 30009 || !sctp.ExternalLocal {
		t.Errorf("SCTP on the userspace datapath: want a stateless port with its NodePort and externalTrafficPolicy Local, got %+v", sctp)
	}
	ports = slices.DeleteFunc(ports, func(p pipeline.ServicePort) bool { return p.IPProto == pipeline.IPProtoSCTP })
	if got := eps(ports, 0, false); !slices.Equal(got, []string{"10.244.2.10:8080"}) {
		t.Errorf("internalTrafficPolicy Local: %v", got)
	}
	if withSCTP := servicePorts(local, all, proxyNode{name: "node-2"}, ids, true); len(withSCTP) != 4 || withSCTP[1].IPProto != pipeline.IPProtoSCTP || withSCTP[1].Stateless {
		t.Errorf("with a datapath that NATs SCTP, want the SCTP port too: %+v", withSCTP)
	}
	if got := eps(ports, 0, true); !slices.Equal(got, []string{"10.244.2.10:8080"}) || ports[0].NodePort != 30080 {
		t.Errorf("externalTrafficPolicy Local: %v (node port %d)", got, ports[0].NodePort)
	}
	if ports[1].Internal.Endpoints != nil || !ports[1].DropWithoutEndpoints {
		t.Errorf("IPv6, no local endpoint on node-2: want none and a drop, got %+v", ports[1])
	}
	if ports[0].AffinityTimeout != maxAffinityTimeout {
		t.Errorf("affinity timeout %d, want it capped at %d", ports[0].AffinityTimeout, maxAffinityTimeout)
	}

	// Terminating endpoints serve only when no endpoint is ready.
	terminating := testSlice("web", "a", discoveryv1.AddressTypeIPv4, 8080,
		sliceEP{"10.244.1.10", "node-1", false, true, true}, sliceEP{"10.244.1.11", "node-1", false, false, true})
	ports = servicePorts(testService("web", nil), []*discoveryv1.EndpointSlice{terminating}, proxyNode{name: "node-1"}, ids, false)
	if got := eps(ports, 0, false); !slices.Equal(got, []string{"10.244.1.10:8080"}) {
		t.Errorf("only terminating: want the serving one, got %v", got)
	}
	withReady := append([]*discoveryv1.EndpointSlice{terminating}, testSlice("web", "b", discoveryv1.AddressTypeIPv4, 8080, ready("10.244.2.10", "node-2")))
	ports = servicePorts(testService("web", nil), withReady, proxyNode{name: "node-1"}, ids, false)
	if got := eps(ports, 0, false); !slices.Equal(got, []string{"10.244.2.10:8080"}) {
		t.Errorf("ready and terminating: want the ready one only, got %v", got)
	}
	headless := testService("web", func(s *corev1.Service) { s.Spec.ClusterIPs = []string{"None"} })
	if ports := servicePorts(headless, all, proxyNode{name: "node-1"}, ids, false); len(ports) != 0 {
		t.Errorf("headless Service: %+v", ports)
	}
}

// recordingFlows records the bundles a FlowClient applies.
type recordingFlows struct {
	*ovsfake.OpenFlow
	mu      sync.Mutex
	bundles [][]string
}

func (r *recordingFlows) Bundle(ctx context.Context, mods []ovs.Mod) error {
	text, _ := ovs.BundleText(mods)
	r.mu.Lock()
	r.bundles = append(r.bundles, strings.Split(strings.TrimSpace(text), "\n"))
	r.mu.Unlock()
	return r.OpenFlow.Bundle(ctx, mods)
}

func (r *recordingFlows) last() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.bundles) == 0 {
		return nil
	}
	return r.bundles[len(r.bundles)-1]
}

func TestServiceEndpointChangeRewritesOnlyItsGroup(t *testing.T) {
	ctx := context.Background()
	of := &recordingFlows{OpenFlow: ovsfake.NewOpenFlow()}
	state := NewNodeState(1, nil)
	syncer := NewFlowSyncer(OpenFlowSwitch(of), state.Desired, time.Hour) // as the agent runs it
	state.SetNode(testNodeConfig())
	state.SetPod("p3", testPod("a", 3, 10))
	ids := newGroupAllocator()
	ready := func(ip string) sliceEP { return sliceEP{ip, "node-1", true, true, false} }
	web := testService("web", nil)
	db := testService("db", func(s *corev1.Service) { s.Spec.ClusterIPs = []string{"10.96.0.20"} })
	state.SetServices(map[string][]pipeline.ServicePort{
		"x/web": servicePorts(web, []*discoveryv1.EndpointSlice{testSlice("web", "w", discoveryv1.AddressTypeIPv4, 8080, ready("10.244.1.10"), ready("10.244.2.10"))}, proxyNode{name: "node-1"}, ids.forService("x/web"), false),
		"x/db":  servicePorts(db, []*discoveryv1.EndpointSlice{testSlice("db", "d", discoveryv1.AddressTypeIPv4, 5432, ready("10.244.3.10"))}, proxyNode{name: "node-1"}, ids.forService("x/db"), false),
	})
	syncer.sync(ctx, true)
	if _, err := syncer.Synced(); err != nil {
		t.Fatal(err)
	}
	groups, _ := of.DumpGroups(ctx)
	if len(groups) != 2 {
		t.Fatalf("groups installed: %v", groups)
	}
	webGroup := state.services["x/web"][0].Internal.ID

	// One endpoint of x/web is replaced.
	state.SetService("x/web", servicePorts(web, []*discoveryv1.EndpointSlice{testSlice("web", "w", discoveryv1.AddressTypeIPv4, 8080, ready("10.244.1.10"), ready("10.244.2.11"))}, proxyNode{name: "node-1"}, ids.forService("x/web"), false))
	syncer.sync(ctx, false)
	bundle := of.last()
	webCookie := pipeline.ObjectFilter(pipeline.CategoryService, pipeline.ServiceObjectID("x/web:web/TCP"))
	sawModify := false
	for _, line := range bundle {
		switch {
		case strings.HasPrefix(line, "group modify group_id="+strconv.FormatUint(uint64(webGroup), 10)+","):
			sawModify = true
		case strings.HasPrefix(line, "group "):
			t.Errorf("bundle touches another group: %s", line)
		case strings.HasPrefix(line, "flow add "):
			e, err := ovs.ParseFlow(strings.TrimPrefix(line, "flow add "))
			if err != nil || !webCookie.Matches(pipeline.Cookie(e.Cookie)) {
				t.Errorf("bundle adds a flow that is not x/web's: %s", line)
			}
		case strings.HasPrefix(line, "flow delete_strict "):
			if !strings.Contains(line, "table=43") {
				t.Errorf("bundle deletes a flow that is not an endpoint's: %s", line)
			}
		}
	}
	if !sawModify || len(bundle) != 3 {
		t.Errorf("want one group modify, one endpoint flow deleted and one added, got:\n%s", strings.Join(bundle, "\n"))
	}

	// x/db goes away: its flows and its group are deleted in one bundle, nothing else.
	before := len(of.Flows())
	state.SetService("x/db", nil)
	syncer.sync(ctx, false)
	groups, _ = of.DumpGroups(ctx)
	if len(groups) != 1 || groups[0].ID != webGroup {
		t.Errorf("groups after deleting x/db: %v", groups)
	}
	// Its ServiceLB flow, the flow of fragments to its ClusterIP and its endpoint's flow.
	if got := len(of.Flows()); got != before-3 {
		t.Errorf("flows %d -> %d, want the 3 of x/db removed", before, got)
	}
	// A full resync against the switch's own dump finds nothing to do.
	n := len(of.bundles)
	syncer.sync(ctx, true)
	if len(of.bundles) != n {
		t.Errorf("full resync applied a bundle: %v", of.last())
	}
}

// TestRenderedFlowsKeepUnchangedServices: Desired (the compiler that keeps unchanged
// objects) equals everything compiled afresh and rendered, through Service changes,
// deletions, additions, pod and node changes, and compiles only the Services whose ports
// changed.
func TestRenderedFlowsKeepUnchangedServices(t *testing.T) {
	state := NewNodeState(1, nil)
	state.SetNode(testNodeConfig())
	state.SetPod("p3", testPod("a", 3, 10))
	ids := newGroupAllocator()
	ready := func(ip string) sliceEP { return sliceEP{ip, "node-1", true, true, false} }
	web := testService("web", nil)
	db := testService("db", func(s *corev1.Service) { s.Spec.ClusterIPs = []string{"10.96.0.20"} })
	webPorts := func(eps ...string) []pipeline.ServicePort {
		var es []sliceEP
		for _, e := range eps {
			es = append(es, ready(e))
		}
		return servicePorts(web, []*discoveryv1.EndpointSlice{testSlice("web", "w", discoveryv1.AddressTypeIPv4, 8080, es...)}, proxyNode{name: "node-1"}, ids.forService("x/web"), false)
	}
	dbPorts := servicePorts(db, []*discoveryv1.EndpointSlice{testSlice("db", "d", discoveryv1.AddressTypeIPv4, 5432, ready("10.244.1.10"))}, proxyNode{name: "node-1"}, ids.forService("x/db"), false)
	same := func(step string) {
		t.Helper()
		compiled, _, err := state.Compiled()
		if err != nil {
			t.Fatal(err)
		}
		want := pipeline.Desire(compiled.Flows, compiled.Groups)
		got, _, err := state.Desired()
		if err != nil {
			t.Fatal(err)
		}
		if !maps.Equal(got.Flows, want.Flows) {
			t.Fatalf("%s: Desired has %d flows, Compiled %d; they differ", step, len(got.Flows), len(want.Flows))
		}
		if !maps.EqualFunc(got.Groups, want.Groups, ovs.Group.Equal) {
			t.Fatalf("%s: groups %v, want %v", step, got.Groups, want.Groups)
		}
	}
	dbEntry := func() uintptr {
		flows, _ := state.compiler.ObjectFlows(pipeline.CategoryService, "x/db")
		return reflect.ValueOf(flows).Pointer()
	}

	state.SetServices(map[string][]pipeline.ServicePort{"x/web": webPorts("10.244.1.10", "10.244.2.10"), "x/db": dbPorts})
	same("first sync")
	kept := dbEntry()
	state.SetService("x/web", webPorts("10.244.1.10", "10.244.2.11"))
	same("one endpoint of x/web replaced")
	if dbEntry() != kept {
		t.Error("x/db was compiled again although its ports did not change")
	}
	state.SetPod("p4", testPod("b", 4, 10)) // the local endpoint's hairpin flows follow the pods
	same("a pod added")
	state.SetService("x/db", nil)
	same("x/db deleted")
	if _, ok := state.compiler.ObjectFlows(pipeline.CategoryService, "x/db"); ok {
		t.Error("the deleted Service is still cached")
	}
	state.SetService("x/db", dbPorts)
	same("x/db back")
	state.SetNode(testNodeConfig()) // a new node configuration: everything is compiled again
	same("node configuration replaced")
}

// TestEvictionsOfEndpointsThatLeftTheSlices: an endpoint of a stateless SCTP port that
// the EndpointSlices no longer list (not one that is merely not ready: Listed keeps it)
// has its learned translations deleted, once the generation without it is installed.
func TestEvictionsOfEndpointsThatLeftTheSlices(t *testing.T) {
	s := NewNodeState(1, nil)
	a, b := netip.MustParseAddrPort("10.244.1.5:9132"), netip.MustParseAddrPort("10.244.2.5:9132")
	port := func(listed ...netip.AddrPort) []pipeline.ServicePort {
		g := pipeline.ServiceGroup{ID: pipeline.ServiceGroupBase | 1, Endpoints: listed[:1]}
		return []pipeline.ServicePort{{Name: "x/s:sctp/SCTP", ClusterIP: netip.MustParseAddr("10.96.0.9"), IPProto: pipeline.IPProtoSCTP,
			Port: 9, Internal: g, External: g, Stateless: true, Listed: listed}}
	}
	s.SetServices(map[string][]pipeline.ServicePort{"x/s": port(a, b)})
	if got := s.TakeEvictions(100); len(got) != 0 {
		t.Fatalf("first sync evicts %v", got)
	}
	gen := s.SetService("x/s", port(a))
	if got := s.TakeEvictions(gen - 1); len(got) != 0 {
		t.Errorf("evicted before the generation without the endpoint was installed: %v", got)
	}
	want := pipeline.SCTPTranslationFilter(port(a, b)[0], b)
	if got := s.TakeEvictions(gen); len(got) != 1 || got[0] != want {
		t.Errorf("after generation %d: %v, want %v", gen, got, want)
	}
	if got := s.TakeEvictions(gen); len(got) != 0 {
		t.Errorf("evictions taken twice: %v", got)
	}
	gen = s.SetService("x/s", nil) // the Service is deleted
	if got := s.TakeEvictions(gen); len(got) != 1 || got[0] != pipeline.SCTPTranslationFilter(port(a)[0], a) {
		t.Errorf("deleted Service: %v", got)
	}
}

// TestServiceExternalIPsGetTheClusterGroup: each family's port carries the Service's
// externalIPs of its family and a group of every usable endpoint of the cluster: the
// ClusterIP's group without internalTrafficPolicy Local, a group of its own with it; a
// stateless SCTP port has none.
func TestServiceExternalIPsGetTheClusterGroup(t *testing.T) {
	ids := newGroupAllocator().forService("x/web")
	ready := func(ip, node string) sliceEP { return sliceEP{ip, node, true, true, false} }
	all := []*discoveryv1.EndpointSlice{
		testSlice("web", "a", discoveryv1.AddressTypeIPv4, 8080, ready("10.244.1.10", "node-1"), ready("10.244.2.10", "node-2")),
		testSlice("web", "b", discoveryv1.AddressTypeIPv6, 8080, ready("fd00::1", "node-1")),
	}
	svc := testService("web", func(s *corev1.Service) {
		s.Spec.ClusterIPs = []string{"10.96.0.10", "fd00:10:96::a"}
		s.Spec.ExternalIPs = []string{"203.0.113.250", "2001:db8::cb00:71fa", "203.0.113.250", "198.51.100.7"}
	})
	ports := servicePorts(svc, all, proxyNode{name: "node-1"}, ids, false)
	if len(ports) != 2 {
		t.Fatalf("ports: %+v", ports)
	}
	if got := fmt.Sprint(ports[0].ExternalIPs, ports[1].ExternalIPs); got != "[198.51.100.7 203.0.113.250] [2001:db8::cb00:71fa]" {
		t.Errorf("external IPs by family: %s", got)
	}
	if ports[0].Cluster.ID != ports[0].Internal.ID {
		t.Errorf("internalTrafficPolicy Cluster: want the ClusterIP's group for external IPs, got %+v", ports[0])
	}
	svc.Spec.InternalTrafficPolicy = ptr.To(corev1.ServiceInternalTrafficPolicyLocal)
	svc.Spec.Ports = append(svc.Spec.Ports, corev1.ServicePort{Name: "s", Port: 9, Protocol: corev1.ProtocolSCTP})
	ports = servicePorts(svc, all, proxyNode{name: "node-1"}, ids, false)
	p := ports[0]
	if got := eps(ports, 0, false); !slices.Equal(got, []string{"10.244.1.10:8080"}) {
		t.Errorf("internalTrafficPolicy Local: ClusterIP group %v", got)
	}
	if p.Cluster.ID == p.Internal.ID || len(p.Cluster.Endpoints) != 2 {
		t.Errorf("internalTrafficPolicy Local: external IPs want their own group of both endpoints, got %+v", p.Cluster)
	}
	for _, sp := range ports {
		if err := sp.Validate(); err != nil {
			t.Errorf("%s: %v", sp.Name, err)
		}
		if sp.Stateless && (sp.ExternalIPs != nil || len(sp.Cluster.Endpoints) != 0) {
			t.Errorf("stateless SCTP port with external IPs: %+v", sp)
		}
	}
}
