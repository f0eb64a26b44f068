package clusterpolicy

import "github.com/kovs-net/kovs/go-controller/pkg/policy"

// Meet returns rules that allow no connection that old or new denies, given the same
// NetworkPolicy tier: policy.MeetClusterRules, which the transition gate enforces while a
// change is on its way to the nodes (its documentation has the argument), over compiled
// rules.
func Meet(old, nu Rules) Rules {
	var olds, news []policy.ClusterRule
	for _, r := range old {
		olds = append(olds, r.ShareRule())
	}
	for _, r := range nu {
		news = append(news, r.ShareRule())
	}
	var out Rules
	for _, r := range policy.MeetClusterRules(olds, news) {
		out = append(out, ruleOf(r))
	}
	return out
}
