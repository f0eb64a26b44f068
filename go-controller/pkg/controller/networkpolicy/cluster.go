package networkpolicy

import (
	"slices"

	"k8s.io/apimachinery/pkg/types"

	"github.com/kovs-net/kovs/go-controller/pkg/policy"
)

// The compiler carries the ClusterNetworkPolicy rules of every node in the node's share
// (policy.NodeShare.ClusterRules). It does not compile them: package clusterpolicy does,
// and hands each node's list over with SetClusterRules. They travel with the
// NetworkPolicy of the node, in the same snapshots and deltas, at the same generations,
// through the same transition gate.
//
// A node's share lists a pod (the agent keeps a new pod closed until it does) only once
// both this compiler and the cluster feed have evaluated it: the pod is then in the
// share's NetworkPolicy and in its cluster rules, in the same version. SetClusterRules
// says where the feed evaluated each pod; a pod the feed has not seen on its node yet
// (created, or scheduled, since the feed's last batch) waits for the feed's next one.

// ExpectClusterRules makes the compiler's first batch wait for the first SetClusterRules
// (the cluster rules compiled from everything their informers listed), so that no share
// is ever sent without them. Call it before Run, when ClusterNetworkPolicies are served.
func (c *Compiler) ExpectClusterRules() {
	c.changes.mu.Lock()
	defer c.changes.mu.Unlock()
	c.changes.clusterExpected = make(chan struct{})
}

// UpdateClusterRules takes a batch of the cluster feed: every node's cluster rules when
// the batch has them (compiled from a view of the cluster in which the pods were where
// the feed's batches evaluated them), and where it evaluated the pods that changed. The
// compiler sends the nodes whose rules changed a delta in its next batch, and lists in
// the shares the pods it has evaluated itself on that node too. The batch's rules are the
// compiler's from then on: the caller must not change them.
func (c *Compiler) UpdateClusterRules(b policy.ClusterBatch) {
	c.changes.mu.Lock()
	c.changes.cluster.Add(b)
	c.changes.clusterSet = true
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

// takeCluster returns what the cluster feed's batches since the last take say, if any
// came.
func (c *changes) takeCluster() (policy.ClusterBatch, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	b, set := c.cluster, c.clusterSet
	c.cluster, c.clusterSet = policy.ClusterBatch{}, false
	return b, set
}

// listable reports whether p's node's share may list p: the cluster feed, once it has
// sent a batch, evaluated p on p's node.
func (m *model) listable(p *pod) bool {
	if m.clusterEvaluated == nil {
		return true
	}
	where, ok := m.clusterEvaluated[p.apiKey()]
	return ok && where == p.node.name
}

// list lists a pod on its node, if it may be listed and is not yet.
func (m *model) list(p *pod) {
	if p.listed || p.node == nil || !m.listable(p) {
		return
	}
	p.listed = true
	m.emitPod(p.node, p.apiKey(), opAdd)
}

// setClusterRules takes a batch of the cluster feed: it lists the pods the feed has now
// evaluated on their nodes and, when the batch has rules, gives every node its new
// cluster rules, touching those whose rules changed. Only the pods the batch names are
// looked at: where the feed evaluated any other pod is as before, and so is whether it
// may be listed.
func (m *model) setClusterRules(b policy.ClusterBatch) {
	m.batch.changed = true
	if m.clusterEvaluated == nil {
		m.clusterEvaluated = map[policy.PodKey]string{} // a feed has sent a batch: listing waits for it from now on
	}
	for k := range b.Forgotten {
		delete(m.clusterEvaluated, k)
	}
	for k, node := range b.Evaluated {
		m.clusterEvaluated[k] = node
		if p, ok := m.pods[types.NamespacedName{Namespace: k.Namespace, Name: k.Name}]; ok {
			m.list(p)
		}
	}
	if !b.HasRules {
		return
	}
	byNode := b.Rules
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
