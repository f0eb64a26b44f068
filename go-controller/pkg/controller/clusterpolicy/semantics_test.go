package clusterpolicy

import (
	"net/netip"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/network-policy-api/apis/v1beta1"

	"github.com/kovs-net/kovs/go-controller/pkg/policy"
)

// The API's edge cases, one connection each, with the verdict and what decided it as the
// API's documentation (apis/v1beta1 of the module) states them.
func TestTierSemantics(t *testing.T) {
	c := testCluster()
	slytherinNets := []netip.Prefix{netip.MustParsePrefix("10.0.1.0/24")}
	npIsolatesGryffindor := fakeNetworkPolicy{
		isolated: map[policy.Direction]map[string]bool{policy.Ingress: {"gryffindor-0": true}},
		allowed:  map[policy.Direction]map[string][]netip.Prefix{policy.Ingress: {"gryffindor-0": slytherinNets}},
	}
	withIngress := func(p *v1beta1.ClusterNetworkPolicy, rules ...v1beta1.ClusterNetworkPolicyIngressRule) *v1beta1.ClusterNetworkPolicy {
		p.Spec.Ingress = rules
		return p
	}
	withEgress := func(p *v1beta1.ClusterNetworkPolicy, rules ...v1beta1.ClusterNetworkPolicyEgressRule) *v1beta1.ClusterNetworkPolicy {
		p.Spec.Egress = rules
		return p
	}
	cases := []struct {
		name     string
		policies []*v1beta1.ClusterNetworkPolicy
		np       NetworkPolicyTier
		conn     Connection
		allowed  bool
		tier     Tier   // of the direction that decided (ingress unless egress denied)
		rule     string // its rule ID, "" for no rule
	}{
		{name: "no policy: the default allows",
			conn: c.conn("slytherin-0", "gryffindor-0", policy.TCP, 80), allowed: true, tier: DecidedByDefault},
		{name: "admin deny beats a NetworkPolicy that allows",
			policies: []*v1beta1.ClusterNetworkPolicy{withIngress(cnp("a", admin, 10, "gryffindor"), ingress(deny, "slytherin"))},
			np:       npIsolatesGryffindor,
			conn:     c.conn("slytherin-0", "gryffindor-0", policy.TCP, 80), allowed: false, tier: DecidedByAdmin, rule: "a/ingress/0"},
		{name: "admin pass hands over to NetworkPolicy, which allows",
			policies: []*v1beta1.ClusterNetworkPolicy{
				withIngress(cnp("a", admin, 10, "gryffindor"), ingress(pass, "slytherin")),
				withIngress(cnp("b", admin, 20, "gryffindor"), ingress(deny, "slytherin"))},
			np:   npIsolatesGryffindor,
			conn: c.conn("slytherin-0", "gryffindor-0", policy.TCP, 80), allowed: true, tier: DecidedByNetworkPolicy},
		{name: "admin pass without NetworkPolicy goes to baseline",
			policies: []*v1beta1.ClusterNetworkPolicy{
				withIngress(cnp("a", admin, 10, "gryffindor"), ingress(pass, "slytherin")),
				withIngress(cnp("z", base, 0, "gryffindor"), ingress(deny, "slytherin"))},
			conn: c.conn("slytherin-0", "gryffindor-0", policy.TCP, 80), allowed: false, tier: DecidedByBaseline, rule: "z/ingress/0"},
		{name: "NetworkPolicy isolation hides baseline",
			policies: []*v1beta1.ClusterNetworkPolicy{withIngress(cnp("z", base, 0, "gryffindor"), ingress(deny, "slytherin"))},
			np:       npIsolatesGryffindor,
			conn:     c.conn("slytherin-0", "gryffindor-0", policy.TCP, 80), allowed: true, tier: DecidedByNetworkPolicy},
		{name: "baseline decides a pod NetworkPolicy does not isolate",
			policies: []*v1beta1.ClusterNetworkPolicy{withIngress(cnp("z", base, 0, "gryffindor"), ingress(deny, "slytherin"))},
			np:       npIsolatesGryffindor,
			conn:     c.conn("slytherin-0", "gryffindor-1", policy.TCP, 80), allowed: false, tier: DecidedByBaseline, rule: "z/ingress/0"},
		{name: "baseline pass is the default allow",
			policies: []*v1beta1.ClusterNetworkPolicy{
				withIngress(cnp("y", base, 0, "gryffindor"), ingress(pass, "slytherin")),
				withIngress(cnp("z", base, 1, "gryffindor"), ingress(deny, "slytherin"))},
			conn: c.conn("slytherin-0", "gryffindor-0", policy.TCP, 80), allowed: true, tier: DecidedByDefault},
		{name: "lower priority value first",
			policies: []*v1beta1.ClusterNetworkPolicy{
				withIngress(cnp("a", admin, 20, "gryffindor"), ingress(deny, "slytherin")),
				withIngress(cnp("b", admin, 10, "gryffindor"), ingress(accept, "slytherin"))},
			conn: c.conn("slytherin-0", "gryffindor-0", policy.TCP, 80), allowed: true, tier: DecidedByAdmin, rule: "b/ingress/0"},
		{name: "equal priority: kovs orders by name",
			policies: []*v1beta1.ClusterNetworkPolicy{
				withIngress(cnp("b", admin, 10, "gryffindor"), ingress(accept, "slytherin")),
				withIngress(cnp("a", admin, 10, "gryffindor"), ingress(deny, "slytherin"))},
			conn: c.conn("slytherin-0", "gryffindor-0", policy.TCP, 80), allowed: false, tier: DecidedByAdmin, rule: "a/ingress/0"},
		{name: "rule order within a policy",
			policies: []*v1beta1.ClusterNetworkPolicy{withIngress(cnp("a", admin, 10, "gryffindor"),
				ingress(accept, "slytherin", tcp(80)), ingress(deny, "slytherin"))},
			conn: c.conn("slytherin-0", "gryffindor-0", policy.TCP, 80), allowed: true, tier: DecidedByAdmin, rule: "a/ingress/0"},
		{name: "a port the first rule does not name falls to the next",
			policies: []*v1beta1.ClusterNetworkPolicy{withIngress(cnp("a", admin, 10, "gryffindor"),
				ingress(accept, "slytherin", tcp(80)), ingress(deny, "slytherin"))},
			conn: c.conn("slytherin-0", "gryffindor-0", policy.TCP, 81), allowed: false, tier: DecidedByAdmin, rule: "a/ingress/1"},
		{name: "egress accept does not skip the destination's ingress",
			policies: []*v1beta1.ClusterNetworkPolicy{
				withEgress(cnp("a", admin, 10, "slytherin"), egress(accept, "gryffindor")),
				withIngress(cnp("b", admin, 20, "gryffindor"), ingress(deny, "slytherin"))},
			conn: c.conn("slytherin-0", "gryffindor-0", policy.TCP, 80), allowed: false, tier: DecidedByAdmin, rule: "b/ingress/0"},
		{name: "egress deny",
			policies: []*v1beta1.ClusterNetworkPolicy{withEgress(cnp("a", admin, 10, "slytherin"), egress(deny, "gryffindor", tcp(80)))},
			conn:     c.conn("slytherin-0", "gryffindor-0", policy.TCP, 80), allowed: false, tier: DecidedByAdmin, rule: "a/egress/0"},
		{name: "no protocols match ICMP",
			policies: []*v1beta1.ClusterNetworkPolicy{withIngress(cnp("a", admin, 10, "gryffindor"), ingress(deny, "slytherin"))},
			conn:     c.conn("slytherin-0", "gryffindor-0", "", 0), allowed: false, tier: DecidedByAdmin, rule: "a/ingress/0"},
		{name: "a port rule does not match ICMP",
			policies: []*v1beta1.ClusterNetworkPolicy{withIngress(cnp("a", admin, 10, "gryffindor"), ingress(deny, "slytherin", tcp(80)))},
			conn:     c.conn("slytherin-0", "gryffindor-0", "", 0), allowed: true, tier: DecidedByDefault},
		{name: "port range",
			policies: []*v1beta1.ClusterNetworkPolicy{withIngress(cnp("a", admin, 10, "gryffindor"), ingress(deny, "slytherin",
				v1beta1.ClusterNetworkPolicyProtocol{UDP: &v1beta1.ClusterNetworkPolicyProtocolUDP{DestinationPort: &v1beta1.Port{Range: &v1beta1.PortRange{Start: 50, End: 60}}}}))},
			conn: c.conn("slytherin-0", "gryffindor-0", policy.UDP, 60), allowed: false, tier: DecidedByAdmin, rule: "a/ingress/0"},
		{name: "ingress named port resolves on the subject",
			policies: []*v1beta1.ClusterNetworkPolicy{withIngress(cnp("a", admin, 10, "gryffindor"), ingress(deny, "slytherin",
				v1beta1.ClusterNetworkPolicyProtocol{DestinationNamedPort: "web"}))},
			conn: c.conn("slytherin-0", "gryffindor-1", policy.TCP, 8080), allowed: false, tier: DecidedByAdmin, rule: "a/ingress/0/tcp-8080"},
		{name: "ingress named port does not match another pod's number",
			policies: []*v1beta1.ClusterNetworkPolicy{withIngress(cnp("a", admin, 10, "gryffindor"), ingress(deny, "slytherin",
				v1beta1.ClusterNetworkPolicyProtocol{DestinationNamedPort: "web"}))},
			conn: c.conn("slytherin-0", "gryffindor-0", policy.TCP, 8080), allowed: true, tier: DecidedByDefault},
		{name: "egress named port resolves on the peer",
			policies: []*v1beta1.ClusterNetworkPolicy{withEgress(cnp("a", admin, 10, "slytherin"), egress(deny, "gryffindor",
				v1beta1.ClusterNetworkPolicyProtocol{DestinationNamedPort: "web"}))},
			conn: c.conn("slytherin-0", "gryffindor-1", policy.TCP, 8080), allowed: false, tier: DecidedByAdmin, rule: "a/egress/0/tcp-8080"},
		{name: "networks match pods' addresses",
			policies: []*v1beta1.ClusterNetworkPolicy{withEgress(cnp("a", admin, 10, "slytherin"), v1beta1.ClusterNetworkPolicyEgressRule{
				Action: deny, To: []v1beta1.ClusterNetworkPolicyEgressPeer{{Networks: []v1beta1.CIDR{"10.0.0.0/24"}}}})},
			conn: c.conn("slytherin-0", "gryffindor-1", policy.TCP, 80), allowed: false, tier: DecidedByAdmin, rule: "a/egress/0"},
		{name: "an unreadable peer fails a deny rule closed: deny all",
			policies: []*v1beta1.ClusterNetworkPolicy{withEgress(cnp("a", admin, 10, "slytherin"), v1beta1.ClusterNetworkPolicyEgressRule{
				Action: pass, To: []v1beta1.ClusterNetworkPolicyEgressPeer{{}}})},
			conn: c.conn("slytherin-0", "ravenclaw-0", policy.UDP, 53), allowed: false, tier: DecidedByAdmin, rule: "a/egress/0"},
		{name: "an unreadable peer fails an accept rule closed: ignored",
			policies: []*v1beta1.ClusterNetworkPolicy{
				withEgress(cnp("a", admin, 10, "slytherin"), v1beta1.ClusterNetworkPolicyEgressRule{
					Action: accept, To: []v1beta1.ClusterNetworkPolicyEgressPeer{{}}}),
				withEgress(cnp("z", base, 10, "slytherin"), egress(deny, "ravenclaw"))},
			conn: c.conn("slytherin-0", "ravenclaw-0", policy.UDP, 53), allowed: false, tier: DecidedByBaseline, rule: "z/egress/0"},
		{name: "domain names match nothing",
			policies: []*v1beta1.ClusterNetworkPolicy{
				withEgress(cnp("a", admin, 10, "slytherin"), v1beta1.ClusterNetworkPolicyEgressRule{
					Action: accept, To: []v1beta1.ClusterNetworkPolicyEgressPeer{{DomainNames: []v1beta1.DomainName{"kubernetes.io"}}}}),
				withEgress(cnp("b", admin, 20, "slytherin"), v1beta1.ClusterNetworkPolicyEgressRule{
					Action: deny, To: []v1beta1.ClusterNetworkPolicyEgressPeer{{Networks: []v1beta1.CIDR{"0.0.0.0/0"}}}})},
			conn: c.conn("slytherin-0", "ravenclaw-0", policy.TCP, 443), allowed: false, tier: DecidedByAdmin, rule: "b/egress/0"},
		{name: "nodes peer selects node addresses",
			policies: []*v1beta1.ClusterNetworkPolicy{withEgress(cnp("a", admin, 10, "slytherin"), v1beta1.ClusterNetworkPolicyEgressRule{
				Action: deny, To: []v1beta1.ClusterNetworkPolicyEgressPeer{{Nodes: &metav1.LabelSelector{MatchLabels: map[string]string{"zone": "b"}}}}})},
			conn:    Connection{Src: &c.pod("slytherin-0").PodKey, SrcIP: c.pod("slytherin-0").IPs[0], DstIP: netip.MustParseAddr("192.168.0.2"), Protocol: policy.TCP, Port: 10250},
			allowed: false, tier: DecidedByAdmin, rule: "a/egress/0"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			v := Compile(tc.policies, c).Allows(tc.np, tc.conn)
			if v.Allowed() != tc.allowed {
				t.Fatalf("allowed = %v, want %v (egress %+v, ingress %+v)", v.Allowed(), tc.allowed, v.Egress, v.Ingress)
			}
			d := v.Ingress
			if !v.Egress.Allowed || v.Egress.Tier != DecidedByDefault {
				d = v.Egress
			}
			if !v.Ingress.Allowed {
				d = v.Ingress
			}
			rule := ""
			if d.Rule != nil {
				rule = d.Rule.ID
			}
			if d.Tier != tc.tier || rule != tc.rule {
				t.Errorf("decided by %s rule %q, want %s rule %q", d.Tier, rule, tc.tier, tc.rule)
			}
		})
	}
}

// A peer selector the API server let through but that is not valid fails the rule
// closed, as an unreadable peer does: a Deny rule denies everything of its subject.
func TestInvalidPeerSelectorFailsClosed(t *testing.T) {
	c := testCluster()
	p := cnp("a", admin, 1, "slytherin")
	p.Spec.Ingress = []v1beta1.ClusterNetworkPolicyIngressRule{{Action: deny, From: []v1beta1.ClusterNetworkPolicyIngressPeer{{
		Namespaces: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "x", Operator: "Near"}}}}}}}
	if v := Compile([]*v1beta1.ClusterNetworkPolicy{p}, c).Allows(nil, c.conn("ravenclaw-0", "slytherin-0", policy.TCP, 80)); v.Allowed() {
		t.Errorf("a Deny rule with an invalid peer selector let traffic through: %+v", v.Ingress)
	}
	p.Spec.Ingress[0].Action = accept
	q := cnp("z", base, 1, "slytherin")
	q.Spec.Ingress = []v1beta1.ClusterNetworkPolicyIngressRule{ingress(deny, "ravenclaw")}
	if v := Compile([]*v1beta1.ClusterNetworkPolicy{p, q}, c).Allows(nil, c.conn("ravenclaw-0", "slytherin-0", policy.TCP, 80)); v.Allowed() {
		t.Errorf("an Accept rule with an invalid peer selector accepted traffic: %+v", v.Ingress)
	}
}
