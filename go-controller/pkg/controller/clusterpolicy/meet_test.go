package clusterpolicy

import (
	"math/rand/v2"
	"net/netip"
	"testing"

	"sigs.k8s.io/network-policy-api/apis/v1beta1"

	"github.com/kovs-net/kovs/go-controller/pkg/policy"
)

// TestMeetAllowsOnlyWhatBothAllow: for random policies and a random edit of them (a
// policy added or removed, an action, a tier, a priority or a peer changed), the meet
// allows no connection that the old or the new rules deny, with and without a
// NetworkPolicy tier; and the meet of rules with themselves decides like them.
func TestMeetAllowsOnlyWhatBothAllow(t *testing.T) {
	c := testCluster()
	np := fakeNetworkPolicy{
		isolated: map[policy.Direction]map[string]bool{policy.Ingress: {"gryffindor-0": true}, policy.Egress: {"slytherin-1": true}},
		allowed: map[policy.Direction]map[string][]netip.Prefix{
			policy.Ingress: {"gryffindor-0": {netip.MustParsePrefix("10.0.1.0/24")}},
			policy.Egress:  {"slytherin-1": {netip.MustParsePrefix("10.0.0.0/16")}}},
	}
	probes := []struct {
		proto policy.Protocol
		port  int32
	}{{policy.TCP, 80}, {policy.TCP, 8080}, {policy.UDP, 53}, {"", 0}}
	restricted, same := 0, 0
	for seed := range uint64(600) {
		rng := rand.New(rand.NewPCG(seed, 2828))
		oldPolicies := randomPolicies(rng)
		newPolicies := edit(rng, oldPolicies)
		old, nu := Compile(oldPolicies, c), Compile(newPolicies, c)
		meet, self := Meet(old, nu), Meet(old, old)
		for _, tier := range []NetworkPolicyTier{nil, np} {
			for i := range c.Pods {
				for j := range c.Pods {
					for _, pr := range probes {
						s, d := &c.Pods[i], &c.Pods[j]
						conn := Connection{Src: &s.PodKey, Dst: &d.PodKey, SrcIP: s.IPs[0], DstIP: d.IPs[0], Protocol: pr.proto, Port: pr.port}
						o, n, m := old.Allows(tier, conn).Allowed(), nu.Allows(tier, conn).Allowed(), meet.Allows(tier, conn).Allowed()
						if m && !(o && n) {
							t.Fatalf("seed %d: %s -> %s %s/%d: the meet allows, old %v, new %v\nold:\n%s\nnew:\n%s",
								seed, s.Name, d.Name, pr.proto, pr.port, o, n, describe(oldPolicies), describe(newPolicies))
						}
						if o && n && !m {
							restricted++
						}
						if got := self.Allows(tier, conn).Allowed(); got != o {
							t.Fatalf("seed %d: %s -> %s %s/%d: the meet of the old rules with themselves says %v, they say %v\n%s",
								seed, s.Name, d.Name, pr.proto, pr.port, got, o, describe(oldPolicies))
						}
						same++
					}
				}
			}
		}
	}
	t.Logf("%d connections; the meet denied %d that both allowed (the price of one rule list)", same, restricted)
}

// edit returns a copy of the policies with one random change.
func edit(rng *rand.Rand, policies []*v1beta1.ClusterNetworkPolicy) []*v1beta1.ClusterNetworkPolicy {
	out := make([]*v1beta1.ClusterNetworkPolicy, len(policies))
	for i, p := range policies {
		out[i] = p.DeepCopy()
	}
	actions := []v1beta1.ClusterNetworkPolicyRuleAction{accept, deny, pass}
	p := out[rng.IntN(len(out))]
	switch rng.IntN(6) {
	case 0:
		added := randomPolicies(rng)[0]
		added.Name = "added"
		return append(out, added)
	case 1:
		return append(out[:0:0], out[1:]...)
	case 2:
		if len(p.Spec.Ingress) > 0 {
			p.Spec.Ingress[0].Action = actions[rng.IntN(3)]
		} else if len(p.Spec.Egress) > 0 {
			p.Spec.Egress[0].Action = actions[rng.IntN(3)]
		}
	case 3:
		p.Spec.Priority = int32(rng.IntN(3))
	case 4:
		p.Spec.Tier = []v1beta1.Tier{admin, base}[rng.IntN(2)]
	default:
		if len(p.Spec.Ingress) > 0 {
			p.Spec.Ingress[0].From = append(p.Spec.Ingress[0].From, v1beta1.ClusterNetworkPolicyIngressPeer{Namespaces: house("ravenclaw")})
		} else {
			p.Spec.Subject = v1beta1.ClusterNetworkPolicySubject{Namespaces: house("hufflepuff")}
		}
	}
	return out
}

// The cases the argument of Meet rests on, each a connection that a simpler meet
// would let through although one side denies it.
func TestMeetCases(t *testing.T) {
	c := testCluster()
	from := func(action v1beta1.ClusterNetworkPolicyRuleAction, houses ...string) v1beta1.ClusterNetworkPolicyIngressRule {
		r := v1beta1.ClusterNetworkPolicyIngressRule{Action: action}
		for _, h := range houses {
			r.From = append(r.From, v1beta1.ClusterNetworkPolicyIngressPeer{Namespaces: house(h)})
		}
		return r
	}
	mk := func(name string, tier v1beta1.Tier, priority int32, rules ...v1beta1.ClusterNetworkPolicyIngressRule) *v1beta1.ClusterNetworkPolicy {
		p := cnp(name, tier, priority, "gryffindor")
		p.Spec.Ingress = rules
		return p
	}
	acceptRavenclaw := mk("accept", admin, 20, from(accept, "ravenclaw"))
	denyRavenclaw := mk("baseline", base, 0, from(deny, "ravenclaw"))
	cases := []struct {
		name     string
		old, new []*v1beta1.ClusterNetworkPolicy
	}{
		{"a Pass removed: what it handed on is not accepted by the rules after it",
			[]*v1beta1.ClusterNetworkPolicy{mk("pass", admin, 10, from(pass, "ravenclaw")), acceptRavenclaw, denyRavenclaw},
			[]*v1beta1.ClusterNetworkPolicy{acceptRavenclaw, denyRavenclaw}},
		{"a Pass that grew: the new part is not accepted by the rules after it",
			[]*v1beta1.ClusterNetworkPolicy{mk("pass", admin, 10, from(pass, "slytherin")), acceptRavenclaw, denyRavenclaw},
			[]*v1beta1.ClusterNetworkPolicy{mk("pass", admin, 10, from(pass, "slytherin", "ravenclaw")), acceptRavenclaw, denyRavenclaw}},
		{"an Accept added before a Deny",
			[]*v1beta1.ClusterNetworkPolicy{mk("deny", admin, 30, from(deny, "ravenclaw"))},
			[]*v1beta1.ClusterNetworkPolicy{acceptRavenclaw, mk("deny", admin, 30, from(deny, "ravenclaw"))}},
		{"a Deny moved later, behind an Accept",
			[]*v1beta1.ClusterNetworkPolicy{mk("deny", admin, 10, from(deny, "ravenclaw")), acceptRavenclaw},
			[]*v1beta1.ClusterNetworkPolicy{mk("deny", admin, 30, from(deny, "ravenclaw")), acceptRavenclaw}},
	}
	conn := c.conn("ravenclaw-0", "gryffindor-0", "TCP", 80)
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			old, nu := Compile(tc.old, c), Compile(tc.new, c)
			o, n := old.Allows(nil, conn), nu.Allows(nil, conn)
			if o.Allowed() && n.Allowed() {
				t.Fatalf("the case is wrong: both old and new allow")
			}
			if m := Meet(old, nu).Allows(nil, conn); m.Allowed() {
				t.Errorf("the meet allows (%s rule %v); old allows %v, new %v", m.Ingress.Tier, m.Ingress.Rule, o.Allowed(), n.Allowed())
			}
		})
	}
}
