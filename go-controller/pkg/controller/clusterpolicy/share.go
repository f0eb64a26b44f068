package clusterpolicy

import (
	"slices"

	"sigs.k8s.io/network-policy-api/apis/v1beta1"

	"github.com/kovs-net/kovs/go-controller/pkg/policy"
)

// ShareRule is the rule as a node's share carries it (policy.ClusterRule), with all its
// subjects.
func (r Rule) ShareRule() policy.ClusterRule {
	return policy.ClusterRule{ID: r.ID, Policy: r.Policy, Name: r.Name, Index: r.Index, Tier: policy.Tier(r.Tier),
		Priority: r.Priority, Direction: r.Direction, Action: policy.ClusterAction(r.Action), Subjects: r.Subjects,
		AnyPeer: r.AnyPeer, Peers: r.Peers, Ports: r.Ports}
}

// ruleOf is the rule a share's rule is.
func ruleOf(r policy.ClusterRule) Rule {
	return Rule{ID: r.ID, Policy: r.Policy, Name: r.Name, Index: r.Index, Tier: v1beta1.Tier(r.Tier),
		Priority: r.Priority, Direction: r.Direction, Action: v1beta1.ClusterNetworkPolicyRuleAction(r.Action),
		Subjects: r.Subjects, AnyPeer: r.AnyPeer, Peers: r.Peers, Ports: r.Ports}
}

// NodeRules splits the rules by the nodes of their subjects: each node gets, in
// precedence order, the rules that apply to at least one of its pods, with only those
// pods as subjects. nodeOf names a pod's node ("" when it has none: such a pod is no
// node's subject).
func (rs Rules) NodeRules(nodeOf func(policy.PodKey) string) map[string][]policy.ClusterRule {
	out := map[string][]policy.ClusterRule{}
	for _, r := range rs {
		byNode := map[string][]policy.PodKey{}
		var order []string
		for _, k := range r.Subjects {
			n := nodeOf(k)
			if n == "" {
				continue
			}
			if _, ok := byNode[n]; !ok {
				order = append(order, n)
			}
			byNode[n] = append(byNode[n], k)
		}
		for _, n := range order {
			sr := r.ShareRule()
			sr.Subjects = byNode[n] // sorted: a subsequence of r.Subjects
			out[n] = append(out[n], sr)
		}
	}
	for n, list := range out {
		slices.SortStableFunc(list, policy.CompareClusterRules)
		out[n] = list
	}
	return out
}
