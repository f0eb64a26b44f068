package networkpolicy

import (
	"slices"

	"github.com/kovs-net/kovs/go-controller/pkg/policy"
)

// The compiler carries the ClusterNetworkPolicy rules of every node in the node's share
// (policy.NodeShare.ClusterRules). It does not compile them: package clusterpolicy does,
// and hands each node's list over with SetClusterRules. They travel with the
// NetworkPolicy of the node, in the same snapshots and deltas, at the same generations,
// through the same transition gate.

// ExpectClusterRules makes the compiler's first batch wait for the first SetClusterRules
// (the cluster rules compiled from everything their informers listed), so that no share
// is ever sent without them. Call it before Run, when ClusterNetworkPolicies are served.
func (c *Compiler) ExpectClusterRules() {
	c.changes.mu.Lock()
	defer c.changes.mu.Unlock()
	c.changes.clusterExpected = make(chan struct{})
}

// SetClusterRules replaces every node's cluster rules (by node name, in precedence
// order; a node not listed has none). The compiler sends the nodes whose rules changed a
// delta in its next batch. The lists are the compiler's from then on: the caller must not
// change them.
func (c *Compiler) SetClusterRules(byNode map[string][]policy.ClusterRule) {
	c.changes.mu.Lock()
	c.changes.cluster, c.changes.clusterSet = byNode, true
	if c.changes.since.IsZero() {
		c.changes.since = c.changes.now()
	}
	if ch := c.changes.clusterExpected; ch != nil {
		c.changes.clusterExpected = nil
		close(ch)
	}
	c.changes.mu.Unlock()
	c.changes.notify()
}

// clusterRulesArrived is closed once the first SetClusterRules came (at once when none is
// expected).
func (c *changes) clusterRulesArrived() <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.clusterExpected == nil {
		done := make(chan struct{})
		close(done)
		return done
	}
	return c.clusterExpected
}

// takeCluster returns the cluster rules set since the last take, if any.
func (c *changes) takeCluster() (map[string][]policy.ClusterRule, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	byNode, set := c.cluster, c.clusterSet
	c.cluster, c.clusterSet = nil, false
	return byNode, set
}

// setClusterRules gives every node its new cluster rules, touching those whose rules
// changed.
func (m *model) setClusterRules(byNode map[string][]policy.ClusterRule) {
	m.batch.changed = true
	for name, n := range m.nodes {
		if _, ok := byNode[name]; !ok && len(n.cluster) > 0 {
			n.cluster = nil
			m.emitCluster(n)
			m.forgetNode(n)
		}
	}
	for name, rules := range byNode {
		if len(rules) == 0 {
			continue
		}
		n := m.node(name)
		if !policy.EqualClusterRules(n.cluster, rules) {
			n.cluster = rules
			m.emitCluster(n)
		}
	}
}

func (m *model) emitCluster(n *node) {
	for _, s := range m.touch(n) {
		s.pending.cluster = true
	}
}

// clusterRulesOf is the node's cluster rules as a delta carries them: never nil.
func clusterRulesOf(n *node) *[]policy.ClusterRule {
	rules := slices.Clone(n.cluster)
	if rules == nil {
		rules = []policy.ClusterRule{}
	}
	return &rules
}
