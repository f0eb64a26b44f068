package realization

import (
	"maps"
	"slices"

	"k8s.io/apimachinery/pkg/types"

	"github.com/kovs-net/kovs/go-controller/pkg/policy"
)

// nodeRecord is what the tracker knows of one node: its share as the compiler last sent
// it, when each part of it last changed, and what the node's agent reported.
type nodeRecord struct {
	share policy.NodeShare
	known bool // a snapshot arrived
	// realized is the last generation the agent reported.
	realized uint64
	// ruleGen, addrGen and toGen are the generations at which each rule, address set and
	// applied-to set was last added or changed; isoGen at which each pod's isolation last
	// changed; removedGen at which a rule of each policy was last removed.
	ruleGen, addrGen, toGen map[string]uint64
	isoGen                  map[podName]uint64
	removedGen              map[types.NamespacedName]uint64
	// rules are the rule IDs of each policy.
	rules map[types.NamespacedName]map[string]struct{}
	// peerUsers and appliedUsers are, per set ID, the rules of the share that reference
	// it as a peer and as their applied-to set: a changed set concerns their policies.
	peerUsers, appliedUsers map[string]map[string]struct{}
	// waiting are the policies not realized on the node, with the generation they need
	// (maxGeneration: not even compiled for the node yet).
	waiting map[types.NamespacedName]uint64
	// clusterGen is the generation at which the share's cluster rules last changed.
	clusterGen uint64
}

// podName is "namespace/name".
type podName string

func podNameOf(k policy.PodKey) podName { return podName(k.Namespace + "/" + k.Name) }

func newNodeRecord(node string) *nodeRecord {
	return &nodeRecord{
		share:        policy.NewNodeShare(node),
		ruleGen:      map[string]uint64{},
		addrGen:      map[string]uint64{},
		toGen:        map[string]uint64{},
		isoGen:       map[podName]uint64{},
		removedGen:   map[types.NamespacedName]uint64{},
		rules:        map[types.NamespacedName]map[string]struct{}{},
		peerUsers:    map[string]map[string]struct{}{},
		appliedUsers: map[string]map[string]struct{}{},
		waiting:      map[types.NamespacedName]uint64{},
	}
}

func policyKey(ref policy.PolicyRef) types.NamespacedName {
	return types.NamespacedName{Namespace: ref.Namespace, Name: ref.Name}
}

// touched is what one change of a node's share concerns: policies whose rules changed
// there, and pods whose isolation did.
type touched struct {
	policies map[types.NamespacedName]struct{}
	pods     []policy.PodKey
	// cluster are the ClusterNetworkPolicies whose rules on the node changed.
	cluster []string
}

// apply records delta d, which must follow the record's share, and returns what it
// touched; its address sets are patched through sets.
func (r *nodeRecord) apply(d policy.Delta, sets *policy.SetMemo) (touched, error) {
	// Apply changes the share's maps in place: take what is needed of the old one first.
	oldIsolation, oldCluster := r.share.Isolation, r.share.ClusterRules
	removed := make([]policy.Rule, len(d.RemovedRules))
	for i, id := range d.RemovedRules {
		removed[i] = r.share.Rules[id]
	}
	updated := make([]policy.Rule, len(d.UpdatedRules))
	for i, rule := range d.UpdatedRules {
		updated[i] = r.share.Rules[rule.ID]
	}
	if err := d.ApplyWith(&r.share, sets); err != nil {
		return touched{}, err
	}
	c := r.change(d.Generation)
	for i, id := range d.RemovedRules {
		c.ruleRemoved(id, removed[i])
	}
	for _, rule := range d.AddedRules {
		c.ruleChanged(nil, rule)
	}
	for i, rule := range d.UpdatedRules {
		c.ruleChanged(&updated[i], rule)
	}
	for _, id := range d.RemovedAddressSets {
		c.setChanged(r.addrGen, c.addrs, id, false)
	}
	for _, id := range slices.Concat(ids(d.AddedAddressSets, func(s policy.AddressSet) string { return s.ID }),
		ids(d.UpdatedAddressSets, func(p policy.AddressSetPatch) string { return p.ID })) {
		c.setChanged(r.addrGen, c.addrs, id, true)
	}
	for _, id := range d.RemovedAppliedToSets {
		c.setChanged(r.toGen, c.tos, id, false)
	}
	for _, s := range slices.Concat(d.AddedAppliedToSets, d.UpdatedAppliedToSets) {
		c.setChanged(r.toGen, c.tos, s.ID, true)
	}
	if d.Isolation != nil {
		c.isolation(oldIsolation)
	}
	tc := c.done()
	tc.cluster = r.clusterChange(oldCluster, r.share.ClusterRules, d.Generation)
	return tc, nil
}

// replace records a snapshot: what differs from the share the record had changed at the
// snapshot's generation, the rest keeps its generation.
func (r *nodeRecord) replace(share policy.NodeShare) touched {
	old := r.share
	r.share = share
	c := r.change(share.Generation)
	for id, rule := range old.Rules {
		if _, ok := share.Rules[id]; !ok {
			c.ruleRemoved(id, rule)
		}
	}
	for id, rule := range share.Rules {
		if prev, ok := old.Rules[id]; !ok {
			c.ruleChanged(nil, rule)
		} else if !prev.Equal(rule) {
			c.ruleChanged(&prev, rule)
		}
	}
	diffSets(old.AddressSets, share.AddressSets, func(a, b policy.AddressSet) bool { return slices.Equal(a.Addresses, b.Addresses) },
		func(id string, present bool) { c.setChanged(r.addrGen, c.addrs, id, present) })
	diffSets(old.AppliedToSets, share.AppliedToSets, func(a, b policy.AppliedToSet) bool { return slices.EqualFunc(a.Pods, b.Pods, samePod) },
		func(id string, present bool) { c.setChanged(r.toGen, c.tos, id, present) })
	c.isolation(old.Isolation)
	tc := c.done()
	tc.cluster = r.clusterChange(old.ClusterRules, share.ClusterRules, share.Generation)
	return tc
}

// diffSets calls changed for every set removed (present false), added or changed.
func diffSets[S any](old, nu map[string]S, equal func(a, b S) bool, changed func(id string, present bool)) {
	for id := range old {
		if _, ok := nu[id]; !ok {
			changed(id, false)
		}
	}
	for id, s := range nu {
		if prev, ok := old[id]; !ok || !equal(prev, s) {
			changed(id, true)
		}
	}
}

// shareChange records the changes of one generation of a node's share.
type shareChange struct {
	r          *nodeRecord
	gen        uint64
	t          touched
	addrs, tos map[string]struct{}
}

func (r *nodeRecord) change(gen uint64) *shareChange {
	return &shareChange{r: r, gen: gen, t: touched{policies: map[types.NamespacedName]struct{}{}},
		addrs: map[string]struct{}{}, tos: map[string]struct{}{}}
}

// ruleRemoved records that the rule old, of ID id, left the share.
func (c *shareChange) ruleRemoved(id string, old policy.Rule) {
	key := policyKey(old.Policy)
	c.t.policies[key] = struct{}{}
	c.r.removedGen[key] = c.gen
	delete(c.r.rules[key], id)
	if len(c.r.rules[key]) == 0 {
		delete(c.r.rules, key)
	}
	delete(c.r.ruleGen, id)
	c.r.unindexUsers(old)
}

// ruleChanged records that rule joined the share (old nil) or replaced old.
func (c *shareChange) ruleChanged(old *policy.Rule, rule policy.Rule) {
	key := policyKey(rule.Policy)
	c.t.policies[key] = struct{}{}
	c.r.ruleGen[rule.ID] = c.gen
	if c.r.rules[key] == nil {
		c.r.rules[key] = map[string]struct{}{}
	}
	c.r.rules[key][rule.ID] = struct{}{}
	if old != nil {
		c.r.unindexUsers(*old)
	}
	c.r.indexUsers(rule)
}

// indexUsers records the sets rule references; unindexUsers forgets them.
func (r *nodeRecord) indexUsers(rule policy.Rule) {
	addUser(r.appliedUsers, rule.AppliedTo, rule.ID)
	for _, peer := range rule.Peers {
		addUser(r.peerUsers, peer, rule.ID)
	}
}

func (r *nodeRecord) unindexUsers(rule policy.Rule) {
	removeUser(r.appliedUsers, rule.AppliedTo, rule.ID)
	for _, peer := range rule.Peers {
		removeUser(r.peerUsers, peer, rule.ID)
	}
}

func addUser(users map[string]map[string]struct{}, set, rule string) {
	if users[set] == nil {
		users[set] = map[string]struct{}{}
	}
	users[set][rule] = struct{}{}
}

func removeUser(users map[string]map[string]struct{}, set, rule string) {
	delete(users[set], rule)
	if len(users[set]) == 0 {
		delete(users, set)
	}
}

// setChanged records that a set appeared or changed (present) or went away.
func (c *shareChange) setChanged(gens map[string]uint64, changed map[string]struct{}, id string, present bool) {
	if present {
		gens[id] = c.gen
	} else {
		delete(gens, id)
	}
	changed[id] = struct{}{}
}

// isolation records the pods whose isolation differs from before.
func (c *shareChange) isolation(before policy.Isolation) {
	after := c.r.share.Isolation
	c.t.pods = isolationChanges(before, after)
	for _, p := range c.t.pods {
		if isolated(after.Ingress, p) || isolated(after.Egress, p) {
			c.r.isoGen[podNameOf(p)] = c.gen
		} else {
			delete(c.r.isoGen, podNameOf(p)) // only selected, hence isolated, pods matter
		}
	}
}

// done adds the policies whose rules reference a changed set (found through the index of
// the sets' users, not by scanning the share's rules) and returns what the change touched.
func (c *shareChange) done() touched {
	c.touchUsers(c.tos, c.r.appliedUsers)
	c.touchUsers(c.addrs, c.r.peerUsers)
	return c.t
}

// touchUsers adds the policies of the users of the sets.
func (c *shareChange) touchUsers(sets map[string]struct{}, users map[string]map[string]struct{}) {
	for id := range sets {
		for ruleID := range users[id] {
			c.t.policies[policyKey(c.r.share.Rules[ruleID].Policy)] = struct{}{}
		}
	}
}

// isolationChanges returns the pods isolated in one direction before and not after, or
// the reverse.
func isolationChanges(before, after policy.Isolation) []policy.PodKey {
	changed := map[policy.PodKey]struct{}{}
	for _, lists := range [][2][]policy.PodKey{{before.Ingress, after.Ingress}, {before.Egress, after.Egress}} {
		in := func(list []policy.PodKey, k policy.PodKey) bool {
			_, found := slices.BinarySearchFunc(list, k, policy.PodKey.Compare)
			return found
		}
		for _, k := range lists[0] {
			if !in(lists[1], k) {
				changed[k] = struct{}{}
			}
		}
		for _, k := range lists[1] {
			if !in(lists[0], k) {
				changed[k] = struct{}{}
			}
		}
	}
	return slices.SortedFunc(maps.Keys(changed), policy.PodKey.Compare)
}

func samePod(a, b policy.AppliedPod) bool { return a.PodKey == b.PodKey && slices.Equal(a.IPs, b.IPs) }

func ids[T any](items []T, id func(T) string) []string {
	out := make([]string, len(items))
	for i, it := range items {
		out[i] = id(it)
	}
	return out
}
