package agent

import (
	"context"
	"net/netip"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/utils/ptr"

	"github.com/kovs-net/kovs/go-controller/pkg/pipeline"
)

// hintedEP is an endpoint of hintedSlice: address, node, conditions and hints.
type hintedEP struct {
	ip                          string
	local                       bool
	ready, serving, terminating bool
	zones, nodes                []string
}

// hintedSlice is one IPv4 slice of port "web" (80) with the endpoints' hints; local
// endpoints are on node-1, the others on node-9.
func hintedSlice(eps ...hintedEP) *discoveryv1.EndpointSlice {
	s := testSlice("web", "w", discoveryv1.AddressTypeIPv4, 80)
	for _, e := range eps {
		node := "node-9"
		if e.local {
			node = "node-1"
		}
		ep := discoveryv1.Endpoint{Addresses: []string{e.ip}, NodeName: ptr.To(node),
			Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(e.ready), Serving: ptr.To(e.serving || e.ready), Terminating: ptr.To(e.terminating)}}
		if len(e.zones)+len(e.nodes) > 0 {
			ep.Hints = &discoveryv1.EndpointHints{}
			for _, z := range e.zones {
				ep.Hints.ForZones = append(ep.Hints.ForZones, discoveryv1.ForZone{Name: z})
			}
			for _, n := range e.nodes {
				ep.Hints.ForNodes = append(ep.Hints.ForNodes, discoveryv1.ForNode{Name: n})
			}
		}
		s.Endpoints = append(s.Endpoints, ep)
	}
	return s
}

func addrs(list []netip.AddrPort) []string {
	out := []string{}
	for _, a := range list {
		out = append(out, a.Addr().String())
	}
	return out
}

// TestTopologyAwareEndpoints mirrors kube-proxy v1.37's TestCategorizeEndpoints
// (pkg/proxy/topology_test.go): cluster are the endpoints of Cluster-policy traffic (hints
// apply), local those of Local-policy traffic (hints do not). Each case's Service port is
// checked where kovs uses them: ClusterIP traffic (Internal: local with
// internalTrafficPolicy Local, else cluster), NodePort traffic (External: local with
// externalTrafficPolicy Local, else cluster) and, where kovs makes one, the Cluster group
// (pods' traffic to a NodePort of externalTrafficPolicy Local, short-circuited).
func TestTopologyAwareEndpoints(t *testing.T) {
	a, b, c, d := []string{"zone-a"}, []string{"zone-b"}, []string{"zone-c"}, []string{"zone-d"}
	ready := func(ip string, zones []string) hintedEP { return hintedEP{ip: ip, ready: true, zones: zones} }
	type policy struct{ itpLocal, etpLocal, nodePort bool }
	cases := []struct {
		name           string
		node, zone     string
		policy         policy
		eps            []hintedEP
		cluster, local []string
	}{{
		name: "all endpoints hinted, node in a zone with endpoints: that zone's", zone: "zone-a",
		eps:     []hintedEP{ready("10.1.2.3", a), ready("10.1.2.4", b), ready("10.1.2.5", c), ready("10.1.2.6", a)},
		cluster: []string{"10.1.2.3", "10.1.2.6"},
	}, {
		name: "externalTrafficPolicy Local: hints ignored for local endpoints", zone: "zone-a", policy: policy{etpLocal: true, nodePort: true},
		eps: []hintedEP{{ip: "10.1.2.3", local: true, ready: true, zones: a}, {ip: "10.1.2.4", local: true, ready: true, zones: b},
			ready("10.1.2.5", c), ready("10.1.2.6", a)},
		cluster: []string{"10.1.2.3", "10.1.2.6"}, local: []string{"10.1.2.3", "10.1.2.4"},
	}, {
		name: "internalTrafficPolicy Local: hints ignored for local endpoints", zone: "zone-a", policy: policy{itpLocal: true, nodePort: true},
		eps: []hintedEP{{ip: "10.1.2.3", local: true, ready: true, zones: a}, {ip: "10.1.2.4", local: true, ready: true, zones: b},
			ready("10.1.2.5", c), ready("10.1.2.6", a)},
		cluster: []string{"10.1.2.3", "10.1.2.6"}, local: []string{"10.1.2.3", "10.1.2.4"},
	}, {
		name: "node without a zone label: every endpoint", zone: "",
		eps: []hintedEP{ready("10.1.2.3", a)}, cluster: []string{"10.1.2.3"},
	}, {
		name: "node in another zone than every hint: every endpoint", zone: "zone-b",
		eps: []hintedEP{ready("10.1.2.3", a)}, cluster: []string{"10.1.2.3"},
	}, {
		name: "an unready endpoint of the zone is left out", zone: "zone-a",
		eps: []hintedEP{ready("10.1.2.3", a), ready("10.1.2.4", b), ready("10.1.2.5", c),
			{ip: "10.1.2.6", zones: a}},
		cluster: []string{"10.1.2.3"},
	}, {
		name: "only unready endpoints in the zone: every ready endpoint", zone: "zone-a",
		eps:     []hintedEP{{ip: "10.1.2.3", zones: a}, ready("10.1.2.4", b), ready("10.1.2.5", c), {ip: "10.1.2.6", zones: a}},
		cluster: []string{"10.1.2.4", "10.1.2.5"},
	}, {
		name: "a ready endpoint without hints: every endpoint", zone: "zone-a",
		eps:     []hintedEP{ready("10.1.2.3", a), ready("10.1.2.4", b), ready("10.1.2.5", nil), ready("10.1.2.6", a)},
		cluster: []string{"10.1.2.3", "10.1.2.4", "10.1.2.5", "10.1.2.6"},
	}, {
		name: "several zone hints per endpoint: any naming the zone", zone: "zone-c",
		eps: []hintedEP{ready("10.1.2.3", []string{"zone-a", "zone-b", "zone-c"}), ready("10.1.2.4", []string{"zone-b", "zone-c"}),
			ready("10.1.2.5", []string{"zone-b", "zone-d"}), ready("10.1.2.6", c)},
		cluster: []string{"10.1.2.3", "10.1.2.4", "10.1.2.6"},
	}, {
		name: "PreferSameNode: the endpoint hinted for this node", node: "node-1", zone: "zone-a",
		eps: []hintedEP{{ip: "10.1.2.3", ready: true, zones: a, nodes: []string{"node-1"}}, {ip: "10.1.2.4", ready: true, zones: b, nodes: []string{"node-2"}},
			{ip: "10.1.2.5", ready: true, zones: c, nodes: []string{"node-3"}}, {ip: "10.1.2.6", ready: true, zones: a, nodes: []string{"node-4"}}},
		cluster: []string{"10.1.2.3"},
	}, {
		name: "PreferSameNode ignored when an endpoint has no hints", node: "node-1", zone: "zone-a",
		eps: []hintedEP{{ip: "10.1.2.3", ready: true, zones: a, nodes: []string{"node-1"}}, {ip: "10.1.2.4", ready: true},
			{ip: "10.1.2.5", ready: true, zones: c, nodes: []string{"node-3"}}, {ip: "10.1.2.6", ready: true, zones: a, nodes: []string{"node-4"}}},
		cluster: []string{"10.1.2.3", "10.1.2.4", "10.1.2.5", "10.1.2.6"},
	}, {
		name: "PreferSameNode without an endpoint for this node: same zone", node: "node-0", zone: "zone-a",
		eps: []hintedEP{{ip: "10.1.2.3", ready: true, zones: a, nodes: []string{"node-1"}}, {ip: "10.1.2.4", ready: true, zones: b, nodes: []string{"node-2"}},
			{ip: "10.1.2.5", ready: true, zones: c, nodes: []string{"node-3"}}, {ip: "10.1.2.6", ready: true, zones: a, nodes: []string{"node-4"}}},
		cluster: []string{"10.1.2.3", "10.1.2.6"},
	}, {
		name: "topology and localness conflict", zone: "zone-a", policy: policy{etpLocal: true, nodePort: true},
		eps: []hintedEP{{ip: "10.0.0.0", local: true, ready: true, zones: a}, {ip: "10.0.0.1", local: true, ready: true, zones: b},
			ready("10.0.0.2", a), ready("10.0.0.3", b)},
		cluster: []string{"10.0.0.0", "10.0.0.2"}, local: []string{"10.0.0.0", "10.0.0.1"},
	}, {
		name: "no ready endpoint: the serving terminating ones, hints or not", zone: "zone-a",
		eps:     []hintedEP{{ip: "10.0.0.0", serving: true, terminating: true, zones: b}, {ip: "10.0.0.1", serving: true, terminating: true, local: true, zones: a}},
		cluster: []string{"10.0.0.0", "10.0.0.1"},
	}, {
		name: "iTP Cluster, eTP Local, terminating local endpoint", zone: "zone-a", policy: policy{etpLocal: true, nodePort: true},
		eps: []hintedEP{{ip: "10.0.0.0", ready: true}, {ip: "10.0.0.1", local: true}, {ip: "10.0.0.2", local: true, serving: true, terminating: true},
			{ip: "10.0.0.3", serving: true, terminating: true}},
		cluster: []string{"10.0.0.0"}, local: []string{"10.0.0.2"},
	}, {
		name: "externalTrafficPolicy Local without a NodePort: hints apply", zone: "zone-a", policy: policy{etpLocal: true},
		eps:     []hintedEP{ready("10.0.0.0", a), {ip: "10.0.0.1", local: true, ready: true, zones: b}},
		cluster: []string{"10.0.0.0"},
	}, {
		name: "not ready, not serving: none", zone: "zone-a",
		eps: []hintedEP{{ip: "10.0.0.0", zones: a}}, cluster: []string{},
	}, {
		name: "hints for other zones only: every endpoint", zone: "zone-a",
		eps: []hintedEP{ready("10.0.0.0", d), ready("10.0.0.1", b)}, cluster: []string{"10.0.0.0", "10.0.0.1"},
	}}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			svc := testService("web", func(s *corev1.Service) {
				if tc.policy.nodePort {
					s.Spec.Type = corev1.ServiceTypeNodePort
					s.Spec.Ports[0].NodePort = 30080
				}
				if tc.policy.itpLocal {
					s.Spec.InternalTrafficPolicy = ptr.To(corev1.ServiceInternalTrafficPolicyLocal)
				}
				if tc.policy.etpLocal {
					s.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal
				}
			})
			node := tc.node
			if node == "" {
				node = "node-1"
			}
			ports := servicePorts(svc, []*discoveryv1.EndpointSlice{hintedSlice(tc.eps...)}, proxyNode{name: node, zone: tc.zone},
				newGroupAllocator().forService("x/web"), false)
			if len(ports) != 1 {
				t.Fatalf("ports %+v, want one", ports)
			}
			p := ports[0]
			want := func(local bool) []string {
				if local {
					return tc.local
				}
				return tc.cluster
			}
			check := func(what string, g pipeline.ServiceGroup, expect []string) {
				t.Helper()
				if got := addrs(g.Endpoints); !slices.Equal(got, expect) && !(len(got) == 0 && len(expect) == 0) {
					t.Errorf("%s: %v, want %v", what, got, expect)
				}
			}
			check("ClusterIP (Internal)", p.Internal, want(tc.policy.itpLocal))
			if p.NodePort != 0 {
				check("NodePort (External)", p.External, want(tc.policy.etpLocal))
			}
			if p.ExternalLocal {
				check("short-circuit (Cluster)", p.Cluster, tc.cluster)
			}
		})
	}
}

// TestServiceProxyFollowsNodeZone: a new zone of the node recomputes the Services, whose
// ClusterIP group then holds the endpoints hinted for the new zone; without a zone, every
// endpoint.
func TestServiceProxyFollowsNodeZone(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	svc := testService("web", nil)
	slice := hintedSlice(hintedEP{ip: "10.244.1.10", ready: true, zones: []string{"zone-a"}},
		hintedEP{ip: "10.244.2.10", ready: true, zones: []string{"zone-b"}})
	client := fake.NewSimpleClientset(svc, slice)
	factory := newServiceInformers(client)
	state := NewNodeState(1, nil)
	proxy, err := NewServiceProxy("node-1", state, factory)
	if err != nil {
		t.Fatal(err)
	}
	proxy.SetZone("zone-a")
	factory.Start(ctx.Done())
	if err := proxy.Start(ctx, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	group := func() []string {
		state.mu.Lock()
		defer state.mu.Unlock()
		ports := state.services["x/web"]
		if len(ports) != 1 {
			return nil
		}
		return addrs(ports[0].Internal.Endpoints)
	}
	if got := group(); !slices.Equal(got, []string{"10.244.1.10"}) {
		t.Fatalf("zone-a: %v, want the endpoint hinted for zone-a", got)
	}
	for _, step := range []struct {
		zone string
		want []string
	}{{"zone-b", []string{"10.244.2.10"}}, {"", []string{"10.244.1.10", "10.244.2.10"}}, {"zone-a", []string{"10.244.1.10"}}} {
		proxy.SetZone(step.zone)
		deadline := time.Now().Add(10 * time.Second)
		for !slices.Equal(group(), step.want) && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
		}
		if got := group(); !slices.Equal(got, step.want) {
			t.Errorf("zone %q: %v, want %v", step.zone, got, step.want)
		}
	}
	// The slice loses its hints: every endpoint, whatever the zone.
	slice = hintedSlice(hintedEP{ip: "10.244.1.10", ready: true}, hintedEP{ip: "10.244.2.10", ready: true})
	if _, err := client.DiscoveryV1().EndpointSlices("x").Update(ctx, slice, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	want := []string{"10.244.1.10", "10.244.2.10"}
	deadline := time.Now().Add(10 * time.Second)
	for !slices.Equal(group(), want) && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if got := group(); !slices.Equal(got, want) {
		t.Errorf("hints removed: %v, want %v", got, want)
	}
}
