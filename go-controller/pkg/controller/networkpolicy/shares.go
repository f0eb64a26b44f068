package networkpolicy

import (
	"maps"
	"net/netip"
	"slices"
	"strings"

	"github.com/kovs-net/kovs/go-controller/pkg/policy"
)

// subscriber receives the deltas of one node's share.
type subscriber struct {
	node    *node
	pending pending
	// lastGen is the generation of the share the subscriber has.
	lastGen uint64
	// wake asks for the pending deltas to be delivered (the subscriber's runner); the
	// compiler calls it, outside its lock, after each batch that gave the subscriber some.
	wake func()
	// behind is the set the subscriber is in while it has a delta to take (its Feed's),
	// so that a Take looks at the subscribers that fell behind rather than at all of
	// them; nil for a subscriber that is woken instead (Watch). It is written under the
	// compiler's write lock only: by commit, by delta when behind is not nil (a Feed
	// calls delta under the write lock), and by unsubscribe.
	behind behindSet
}

// behindSet holds the subscribers that have a delta to take: a subscriber outside it has
// nothing pending and is at its node's generation. commit adds the subscribers of every
// node it moves to the new generation (every pending change is recorded through touch,
// so those are the only ones that can fall behind, and each of them has a delta after
// it, if only of its generation), and delta and unsubscribe take them out.
type behindSet map[*subscriber]struct{}

// subscribe registers a subscriber of node name and returns it with the node's share.
func (m *model) subscribe(name string) (*subscriber, policy.NodeShare) {
	n := m.node(name)
	s := &subscriber{node: n, pending: newPending(), lastGen: n.generation, wake: func() {}}
	n.subs = append(n.subs, s)
	m.watched[n] = struct{}{}
	return s, m.snapshot(n)
}

func (m *model) unsubscribe(s *subscriber) {
	delete(s.behind, s)
	n := s.node
	if i := slices.Index(n.subs, s); i >= 0 {
		n.subs = slices.Delete(n.subs, i, i+1)
	}
	if len(n.subs) == 0 {
		delete(m.watched, n)
	}
	m.forgetNode(n)
}

// forgetNode drops a node that has nothing and nobody watching.
func (m *model) forgetNode(n *node) {
	if len(n.pods) == 0 && len(n.subs) == 0 && len(n.groups) == 0 && len(n.cluster) == 0 {
		delete(m.nodes, n.name)
	}
}

// The emit functions record an exact transition of a node's share for its subscribers.

func (m *model) emitRule(n *node, r *rule, o op) {
	for _, s := range m.touch(n) {
		s.pending.rule(r, o)
	}
}

func (m *model) emitAppliedTo(n *node, g *group, o op) {
	for _, s := range m.touch(n) {
		s.pending.group(g, o)
	}
}

func (m *model) emitAddr(n *node, a *addrSet, o op) {
	for _, s := range m.touch(n) {
		s.pending.addr(a).event(o)
	}
}

func (m *model) emitPatch(n *node, a *addrSet, added, removed []netip.Prefix) {
	for _, s := range m.touch(n) {
		s.pending.addr(a).patch(added, removed)
	}
}

// emitPod records that the node's evaluated pods gained or lost a pod.
func (m *model) emitPod(n *node, k policy.PodKey, o op) {
	for _, s := range m.touch(n) {
		s.pending.pod(k, o)
	}
}

func (m *model) emitIsolation(n *node) {
	for _, s := range m.touch(n) {
		s.pending.isolation = true
	}
}

// touch records that n's share changes in this batch (commit tells its subscribers), and
// returns its subscribers.
func (m *model) touch(n *node) []*subscriber {
	m.batch.touched[n] = struct{}{}
	return n.subs
}

// snapshot returns node n's share, at the generation at which it last changed. Its
// address lists, and its rules map when all its rules come from one group with many, are
// shared with the model, which never modifies them in place: a receiver that changes the
// share (as Delta.Apply does) must Clone it first.
func (m *model) snapshot(n *node) policy.NodeShare {
	share := policy.NewNodeShare(n.name)
	share.Generation = n.generation
	share.Rules = rulesOf(n)
	for g := range n.groups {
		share.AppliedToSets[g.id] = g.appliedToOn(n)
	}
	for a := range n.addrRefs {
		share.AddressSets[a.id] = policy.AddressSet{ID: a.id, Addresses: a.list()}
	}
	share.Isolation = isolationOf(n)
	share.Pods = podsOf(n)
	share.ClusterRules = n.cluster
	return share
}

// cloneRulesMin is the number of rules from which a group keeps its rules by ID for
// snapshots (10,000 policies selecting the same pods are 10,000 rules of one group, on
// every node of those pods): a node whose rules all come from that group shares the map,
// one whose other groups have rules too starts from a clone of it, which costs a copy
// of its memory against hashing every rule again into a growing map.
const cloneRulesMin = 64

// rulesOf returns the rules of n's groups by ID: the cached map of its only group with
// rules, if that group has many, else a new map (a clone of the largest group's cached
// map, if it has many, with the others' rules added).
func rulesOf(n *node) map[string]policy.Rule {
	var big *group
	total := 0
	for g := range n.groups {
		total += len(g.rules)
		if len(g.rules) >= cloneRulesMin && (big == nil || len(g.rules) > len(big.rules)) {
			big = g
		}
	}
	var rules map[string]policy.Rule
	switch {
	case big != nil && total == len(big.rules):
		return big.rulesByID()
	case big != nil:
		rules = maps.Clone(big.rulesByID())
	default:
		rules = make(map[string]policy.Rule, total)
	}
	for g := range n.groups {
		if g == big {
			continue
		}
		for _, r := range g.rules {
			rules[r.api.ID] = r.api
		}
	}
	return rules
}

// rulesByID returns g's rules by ID, cached until its rules change. The map is shared:
// never modify it.
func (g *group) rulesByID() map[string]policy.Rule {
	if g.ruleMap == nil {
		g.ruleMap = make(map[string]policy.Rule, len(g.rules))
		for _, r := range g.rules {
			g.ruleMap[r.api.ID] = r.api
		}
	}
	return g.ruleMap
}

// podsOf returns the node's listed pods, sorted.
func podsOf(n *node) []policy.PodKey {
	if len(n.pods) == 0 {
		return nil
	}
	keys := make([]policy.PodKey, 0, len(n.pods))
	for p := range n.pods {
		if p.listed {
			keys = append(keys, p.apiKey())
		}
	}
	if len(keys) == 0 {
		return nil
	}
	slices.SortFunc(keys, policy.PodKey.Compare)
	return keys
}

// appliedToOn returns g's applied-to set restricted to the pods of n.
func (g *group) appliedToOn(n *node) policy.AppliedToSet {
	list := g.members.on(n)
	set := policy.AppliedToSet{ID: g.id, Pods: make([]policy.AppliedPod, len(list))}
	for i, p := range list {
		set.Pods[i] = p.ref()
	}
	slices.SortFunc(set.Pods, func(a, b policy.AppliedPod) int { return a.PodKey.Compare(b.PodKey) })
	return set
}

func isolationOf(n *node) policy.Isolation {
	var iso policy.Isolation
	for p := range n.pods {
		if p.isolating[ingress] > 0 {
			iso.Ingress = append(iso.Ingress, p.apiKey())
		}
		if p.isolating[egress] > 0 {
			iso.Egress = append(iso.Egress, p.apiKey())
		}
	}
	slices.SortFunc(iso.Ingress, policy.PodKey.Compare)
	slices.SortFunc(iso.Egress, policy.PodKey.Compare)
	return iso
}

// delta takes what is pending for s as a delta from the share s has to the node's current
// one. It reports false when s is caught up. A delta may change nothing but the
// generation, when the events since s's last delta cancelled out: s still moves to the
// node's generation, where its node's other subscribers are or will be.
func (m *model) delta(s *subscriber) (policy.Delta, bool) {
	// Caught up either way when delta returns. A nil set (Watch, under the read lock) is
	// not written: delete on a nil map does nothing.
	delete(s.behind, s)
	if s.pending.empty() && s.lastGen == s.node.generation {
		return policy.Delta{}, false
	}
	p := s.pending
	s.pending = newPending()
	d := policy.Delta{Node: s.node.name, FromGeneration: s.lastGen, Generation: s.node.generation}
	ruleChanges(&d, p.rules)
	appliedToChanges(&d, s.node, p.appliedTo)
	addrChanges(&d, p.addrs)
	podChanges(&d, p.pods)
	if p.isolation {
		iso := isolationOf(s.node)
		d.Isolation = &iso
	}
	if p.cluster {
		d.ClusterRules = clusterRulesOf(s.node)
	}
	s.lastGen = s.node.generation
	return d, true
}

func ruleChanges(d *policy.Delta, pend map[string]pendingRule) {
	for _, id := range sortedKeys(pend) {
		switch p := pend[id]; p.op {
		case opRemove:
			d.RemovedRules = append(d.RemovedRules, id)
		case opAdd:
			d.AddedRules = append(d.AddedRules, p.rule.api)
		default:
			d.UpdatedRules = append(d.UpdatedRules, p.rule.api)
		}
	}
}

func appliedToChanges(d *policy.Delta, n *node, pend map[string]pendingGroup) {
	for _, id := range sortedKeys(pend) {
		switch p := pend[id]; p.op {
		case opRemove:
			d.RemovedAppliedToSets = append(d.RemovedAppliedToSets, id)
		case opAdd:
			d.AddedAppliedToSets = append(d.AddedAppliedToSets, p.group.appliedToOn(n))
		default:
			d.UpdatedAppliedToSets = append(d.UpdatedAppliedToSets, p.group.appliedToOn(n))
		}
	}
}

func addrChanges(d *policy.Delta, pend map[string]*addrPending) {
	for _, id := range sortedKeys(pend) {
		a := pend[id]
		if a.op == opRemove || a.op == opReplace {
			d.RemovedAddressSets = append(d.RemovedAddressSets, id)
		}
		switch a.op {
		case opAdd, opReplace:
			d.AddedAddressSets = append(d.AddedAddressSets, policy.AddressSet{ID: id, Addresses: a.set.list()})
		case opPatch:
			if len(a.added)+len(a.removed) > 0 {
				d.UpdatedAddressSets = append(d.UpdatedAddressSets,
					policy.AddressSetPatch{ID: id, Added: sortedPrefixes(a.added), Removed: sortedPrefixes(a.removed)})
			}
		}
	}
}

// podChanges lists the pods that joined or left the node; a pod that left and came back
// (same UID) did not change for the receiver.
func podChanges(d *policy.Delta, pend map[policy.PodKey]op) {
	for k, o := range pend {
		switch o {
		case opAdd:
			d.AddedPods = append(d.AddedPods, k)
		case opRemove:
			d.RemovedPods = append(d.RemovedPods, k)
		}
	}
	slices.SortFunc(d.AddedPods, policy.PodKey.Compare)
	slices.SortFunc(d.RemovedPods, policy.PodKey.Compare)
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, strings.Compare)
	return keys
}

func sortedPrefixes(set map[netip.Prefix]struct{}) []netip.Prefix {
	out := make([]netip.Prefix, 0, len(set))
	for p := range set {
		out = append(out, p)
	}
	return policy.SortPrefixes(out)
}
