package pipeline

import (
	"fmt"
	"net/netip"
	"testing"

	"github.com/kovs-net/kovs/go-controller/pkg/policy"
)

// The reference NetworkPolicy scenario is node-1 of the three-node dual-stack cluster,
// with five local pods and the share kovs-controller would send for these policies:
//
//	x/web  applies to x/a, Ingress and Egress:
//	       ingress 0: from s-clients (x/b, and x/r on node-2) to TCP 80
//	       ingress 1: from anywhere to TCP 8000-8080 (endPort)
//	       ingress 2: from s-clients to "http", which x/a resolves to TCP 9090
//	       ingress 3: from s-nobody (a podSelector that selects nothing): matches nothing
//	       egress 0:  to 0.0.0.0/0 except 10.0.0.0/8, and to fd00:99::/64, any port
//	       egress 1:  to s-clients, any port
//	       egress 2:  anywhere on UDP 53 and all of SCTP
//	x/db   applies to x/a and x/b, Ingress: from s-clients to TCP 80 (the same clauses as
//	       x/web ingress 0: one flow per clause carries both conjunctions)
//	x/open applies to x/d, Ingress: one rule without peers or ports (allows everything)
//
// y/c is selected by no policy. x/new has a port but kovs-controller has not evaluated it
// yet (the share does not list it): it is closed both ways.

const (
	ofportA   uint32 = 3
	ofportB   uint32 = 4
	ofportC   uint32 = 5
	ofportNew uint32 = 6
	ofportD   uint32 = 7
)

// policyPod is a pod of node-1 at host address number host of each family.
func policyPod(ns, name string, ofport uint32, host int) PodPort {
	return PodPort{Namespace: ns, Name: name, UID: "uid-" + ns + "-" + name, OFPort: ofport,
		MAC: mac(fmt.Sprintf("0a:58:0a:f4:01:%02x", host)),
		IPs: []netip.Addr{ip(fmt.Sprintf("10.244.1.%d", host)), ip(fmt.Sprintf("fd00:10:244:1::%x", host))}}
}

// policyPods are the local pods of the reference scenario.
func policyPods() []PodPort {
	return []PodPort{
		policyPod("x", "a", ofportA, 10), policyPod("x", "b", ofportB, 11), policyPod("y", "c", ofportC, 12),
		policyPod("x", "new", ofportNew, 13), policyPod("x", "d", ofportD, 14),
	}
}

// Remote pods: x/r on node-2, y/s on node-3.
var (
	remoteR4, remoteR6 = ip("10.244.2.10"), ip("fd00:10:244:2::a")
	remoteS4, remoteS6 = ip("10.244.3.10"), ip("fd00:10:244:3::a")
)

func key(ns, name string) policy.PodKey {
	return policy.PodKey{Namespace: ns, Name: name, UID: "uid-" + ns + "-" + name}
}

func refOf(p PodPort) policy.AppliedPod {
	return policy.AppliedPod{PodKey: key(p.Namespace, p.Name), IPs: p.IPs}
}

func prefixList(ss ...string) []netip.Prefix {
	out := make([]netip.Prefix, len(ss))
	for i, s := range ss {
		out[i] = cidr(s)
	}
	return policy.SortPrefixes(out)
}

// policyShare is node-1's share of the reference scenario.
func policyShare() policy.NodeShare {
	pods := policyPods()
	a, b, d := pods[0], pods[1], pods[4]
	s := policy.NewNodeShare("node-1")
	s.Generation = 7
	s.AddressSets = map[string]policy.AddressSet{
		"s-clients": {ID: "s-clients", Addresses: prefixList("10.244.1.11/32", "fd00:10:244:1::b/128", "10.244.2.10/32", "fd00:10:244:2::a/128")},
		"s-nobody":  {ID: "s-nobody"},
		"b-world":   {ID: "b-world", Addresses: policy.SubtractPrefixes(cidr("0.0.0.0/0"), []netip.Prefix{cidr("10.0.0.0/8")})},
		"b-v6":      {ID: "b-v6", Addresses: prefixList("fd00:99::/64")},
	}
	s.AppliedToSets = map[string]policy.AppliedToSet{
		"g-web":  {ID: "g-web", Pods: []policy.AppliedPod{refOf(a)}},
		"g-db":   {ID: "g-db", Pods: []policy.AppliedPod{refOf(a), refOf(b)}},
		"g-open": {ID: "g-open", Pods: []policy.AppliedPod{refOf(d)}},
	}
	web := policy.PolicyRef{Namespace: "x", Name: "web", UID: "np-web"}
	tcp := func(port, end int32) policy.Port { return policy.Port{Protocol: policy.TCP, Port: port, EndPort: end} }
	rules := []policy.Rule{
		{ID: "x/web/ingress/0", Policy: web, RuleIndex: 0, Direction: policy.Ingress, AppliedTo: "g-web",
			Peers: []string{"s-clients"}, Ports: []policy.Port{tcp(80, 0)}},
		{ID: "x/web/ingress/1", Policy: web, RuleIndex: 1, Direction: policy.Ingress, AppliedTo: "g-web",
			Ports: []policy.Port{tcp(8000, 8080)}},
		{ID: "x/web/ingress/2/tcp-9090", Policy: web, RuleIndex: 2, Direction: policy.Ingress, AppliedTo: "g-web",
			Peers: []string{"s-clients"}, Ports: []policy.Port{tcp(9090, 0)}},
		{ID: "x/web/ingress/3", Policy: web, RuleIndex: 3, Direction: policy.Ingress, AppliedTo: "g-web",
			Peers: []string{"s-nobody"}},
		{ID: "x/web/egress/0", Policy: web, RuleIndex: 0, Direction: policy.Egress, AppliedTo: "g-web",
			Peers: []string{"b-v6", "b-world"}},
		{ID: "x/web/egress/1", Policy: web, RuleIndex: 1, Direction: policy.Egress, AppliedTo: "g-web",
			Peers: []string{"s-clients"}},
		{ID: "x/web/egress/2", Policy: web, RuleIndex: 2, Direction: policy.Egress, AppliedTo: "g-web",
			Ports: []policy.Port{{Protocol: policy.UDP, Port: 53}, {Protocol: policy.SCTP}}},
		{ID: "x/db/ingress/0", Policy: policy.PolicyRef{Namespace: "x", Name: "db", UID: "np-db"}, Direction: policy.Ingress,
			AppliedTo: "g-db", Peers: []string{"s-clients"}, Ports: []policy.Port{tcp(80, 0)}},
		{ID: "x/open/ingress/0", Policy: policy.PolicyRef{Namespace: "x", Name: "open", UID: "np-open"}, Direction: policy.Ingress,
			AppliedTo: "g-open"},
	}
	for _, r := range rules {
		r.Action = policy.ActionAllow
		s.Rules[r.ID] = r
	}
	s.Isolation = policy.Isolation{
		Ingress: []policy.PodKey{key("x", "a"), key("x", "b"), key("x", "d")},
		Egress:  []policy.PodKey{key("x", "a")},
	}
	s.Pods = []policy.PodKey{key("x", "a"), key("x", "b"), key("x", "d"), key("y", "c")}
	return s
}

// policyScenario is the golden scenario: node-1's flows with the reference policy.
func policyScenario() scenario {
	sc := threeNodesDualStack(1)
	sc.name = "three-nodes-dual-stack-node-1-policy"
	sc.title = "node-1 of three dual-stack nodes, with NetworkPolicy (see policy_scenario_test.go)"
	sc.pods = policyPods()
	share := policyShare()
	sc.policy = &share
	return sc
}

// policyTracer compiles the scenario with share instead of the reference one.
func policyTracer(t *testing.T, share policy.NodeShare) *Tracer {
	t.Helper()
	sc := policyScenario()
	sc.policy = &share
	return sc.tracer(t)
}

// PodIngressDeny is the flow the pipeline installs for an ingress-isolated pod (x/b in
// the reference share), and for no pod that is not isolated (y/c): the e2e tests that read
// its counter as evidence of a drop rely on it.
func TestPodIngressDenyIsTheInstalledFlow(t *testing.T) {
	flows := policyScenario().flows(t)
	has := func(want Flow) bool {
		for _, f := range flows {
			if f.Key() == want.Key() && fmt.Sprint(f.Actions) == fmt.Sprint(want.Actions) {
				return true
			}
		}
		return false
	}
	if !has(PodIngressDeny(ofportB)) {
		t.Errorf("no flow %v among the isolated x/b's", PodIngressDeny(ofportB).Key())
	}
	if has(PodIngressDeny(ofportC)) {
		t.Errorf("y/c is not isolated, yet has %v", PodIngressDeny(ofportC).Key())
	}
}
