package clusterpolicy

import (
	"math/rand/v2"
	"net/netip"
	"slices"
	"testing"

	"github.com/kovs-net/kovs/go-controller/pkg/policy"
)

// shareOf is node's share: its cluster rules, and the fake NetworkPolicy tier of its
// pods as isolation and allow rules.
func shareOf(c *Cluster, node string, rules []policy.ClusterRule, np fakeNetworkPolicy) policy.NodeShare {
	s := policy.NewNodeShare(node)
	s.ClusterRules = rules
	for _, p := range c.Pods {
		if p.Node != node {
			continue
		}
		s.Pods = append(s.Pods, p.PodKey)
		for _, dir := range []policy.Direction{policy.Ingress, policy.Egress} {
			if !np.isolated[dir][p.Name] {
				continue
			}
			if dir == policy.Ingress {
				s.Isolation.Ingress = append(s.Isolation.Ingress, p.PodKey)
			} else {
				s.Isolation.Egress = append(s.Isolation.Egress, p.PodKey)
			}
			id := p.Name + "/" + string(dir)
			s.AppliedToSets[id] = policy.AppliedToSet{ID: id, Pods: []policy.AppliedPod{{PodKey: p.PodKey}}}
			s.AddressSets[id] = policy.AddressSet{ID: id, Addresses: policy.SortPrefixes(np.allowed[dir][p.Name])}
			s.Rules[id] = policy.Rule{ID: id, Direction: dir, AppliedTo: id, Peers: []string{id}, Action: policy.ActionAllow}
		}
	}
	for _, list := range []*[]policy.PodKey{&s.Pods, &s.Isolation.Ingress, &s.Isolation.Egress} {
		slices.SortFunc(*list, policy.PodKey.Compare)
	}
	return s
}

// TestNodeSharesAgreeWithModel splits random compiled policies into the nodes' shares
// (Rules.NodeRules) and checks every pod-to-pod connection, each direction decided by
// the share of its own pod's node (Decide, the verdict the datapath implements), against
// the independent model, with and without a NetworkPolicy tier.
func TestNodeSharesAgreeWithModel(t *testing.T) {
	c := testCluster()
	np := fakeNetworkPolicy{
		isolated: map[policy.Direction]map[string]bool{policy.Ingress: {"gryffindor-0": true, "ravenclaw-1": true}, policy.Egress: {"slytherin-1": true}},
		allowed: map[policy.Direction]map[string][]netip.Prefix{
			policy.Ingress: {"gryffindor-0": {netip.MustParsePrefix("10.0.1.0/24")}},
			policy.Egress:  {"slytherin-1": {netip.MustParsePrefix("10.0.0.0/16"), netip.MustParsePrefix("fd00::/16")}}},
	}
	nodeOf := map[policy.PodKey]string{}
	for _, p := range c.Pods {
		nodeOf[p.PodKey] = p.Node
	}
	probes := []struct {
		proto policy.Protocol
		port  int32
	}{{policy.TCP, 80}, {policy.TCP, 8080}, {policy.UDP, 53}, {"", 0}}
	checked, denied := 0, 0
	for seed := range uint64(60) {
		policies := randomPolicies(rand.New(rand.NewPCG(seed, 37)))
		byNode := Compile(policies, c).NodeRules(func(k policy.PodKey) string { return nodeOf[k] })
		for _, tier := range []fakeNetworkPolicy{{}, np} {
			ref := refModel{c: c, policies: policies, np: tier}
			if tier.isolated == nil {
				ref.np = nil
			}
			shares := map[string]policy.NodeShare{}
			for _, n := range []string{"node-a", "node-b"} {
				shares[n] = shareOf(c, n, byNode[n], tier)
				if err := shares[n].Validate(); err != nil {
					t.Fatalf("seed %d: the share of %s is not valid: %v", seed, n, err)
				}
			}
			for i := range c.Pods {
				for j := range c.Pods {
					for family := range 2 {
						for _, pr := range probes {
							s, d := &c.Pods[i], &c.Pods[j]
							conn := Connection{Src: &s.PodKey, Dst: &d.PodKey, SrcIP: s.IPs[family], DstIP: d.IPs[family], Protocol: pr.proto, Port: pr.port}
							out := shares[s.Node].Decide(policy.Egress, s.PodKey, d.IPs[family], pr.proto, pr.port)
							in := shares[d.Node].Decide(policy.Ingress, d.PodKey, s.IPs[family], pr.proto, pr.port)
							got, want := out.Allowed && in.Allowed, ref.allowed(conn)
							checked++
							if !want {
								denied++
							}
							if got != want {
								t.Fatalf("seed %d: %s -> %s %s/%d (family %d): the shares say %v (egress %+v, ingress %+v), the model %v\npolicies:\n%s",
									seed, s.Name, d.Name, pr.proto, pr.port, family, got, out, in, want, describe(policies))
							}
						}
					}
				}
			}
		}
	}
	if denied == 0 || denied == checked {
		t.Fatalf("%d of %d connections denied: the generator does not exercise both verdicts", denied, checked)
	}
	t.Logf("%d connections checked, %d denied", checked, denied)
}
