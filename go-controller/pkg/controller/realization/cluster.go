package realization

import (
	"slices"

	"github.com/kovs-net/kovs/go-controller/pkg/policy"
)

// ClusterNetworkPolicies are realized per node as a whole: a node's share carries its
// cluster rules as one list (policy.NodeShare.ClusterRules), so a policy with rules in it
// is enforced on the node once the agent reported a generation at least as new as the
// one at which the list last changed. The nodes a policy concerns are those whose share
// has rules of it.

// ClusterChanged is told the ClusterNetworkPolicies whose realization may have changed.
type ClusterChanged func(names []string)

// OnClusterChange sets who is told (before Run).
func (t *Tracker) OnClusterChange(f ClusterChanged) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.clusterChanged = f
}

// ClusterRealization says on how many of the nodes whose shares have rules of the
// ClusterNetworkPolicy name (concerned) their agent enforces them (realized).
func (t *Tracker) ClusterRealization(name string) (realized, concerned int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, r := range t.nodes {
		if !slices.ContainsFunc(r.share.ClusterRules, func(c policy.ClusterRule) bool { return c.Policy == name }) {
			continue
		}
		concerned++
		if r.known && r.realized >= r.clusterGen {
			realized++
		}
	}
	return realized, concerned
}

// clusterChange records that the node's cluster rules became nu at generation gen, if
// they differ from old, and returns the policies concerned.
func (r *nodeRecord) clusterChange(old, nu []policy.ClusterRule, gen uint64) []string {
	if policy.EqualClusterRules(old, nu) {
		return nil
	}
	r.clusterGen = gen
	return clusterPolicies(slices.Concat(old, nu))
}

// clusterPolicies are the names of the policies of rules, sorted and unique.
func clusterPolicies(rules []policy.ClusterRule) []string {
	names := make([]string, 0, len(rules))
	for _, c := range rules {
		names = append(names, c.Policy)
	}
	slices.Sort(names)
	return slices.Compact(names)
}

// tellCluster tells the cluster policies concerned, outside the lock.
func (t *Tracker) tellCluster(names []string) {
	t.mu.Lock()
	f := t.clusterChanged
	t.mu.Unlock()
	if f != nil && len(names) > 0 {
		f(names)
	}
}
