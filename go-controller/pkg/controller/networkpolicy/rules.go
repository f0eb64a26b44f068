package networkpolicy

import (
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/types"
)

// setPolicy records a NetworkPolicy (nil: deleted): it compiles the policy again and
// applies the difference to the groups and nodes. Rules that did not change keep their
// identity, so nodes see only real changes.
func (m *model) setPolicy(key types.NamespacedName, np *networkingv1.NetworkPolicy) {
	m.batch.changed = true
	old := m.policies[key]
	var nu *policyState
	if np != nil {
		nu = m.compilePolicy(key, np)
		m.policies[key] = nu
	} else {
		delete(m.policies, key)
	}
	if old == nil {
		old = &policyState{}
	} else {
		delete(m.batch.dirtyPolicies, old)
	}
	if nu == nil {
		nu = &policyState{}
	}
	m.changeIsolation(old, nu)
	oldByID, nuByID := rulesByID(old.rules), rulesByID(nu.rules)
	for _, r := range old.rules {
		if kept := nuByID(r.api.ID); kept == nil || !kept.api.Equal(r.api) {
			m.detachRule(r)
		}
	}
	for i, r := range nu.rules {
		if prev := oldByID(r.api.ID); prev != nil && prev.api.Equal(r.api) {
			nu.rules[i] = prev
		} else {
			m.attachRule(r)
		}
	}
	m.release(old)
}

// rulesByID returns a lookup of rules by ID: a scan for the few rules of most policies.
func rulesByID(rules []*rule) func(id string) *rule {
	if len(rules) <= 16 {
		return func(id string) *rule {
			for _, r := range rules {
				if r.api.ID == id {
					return r
				}
			}
			return nil
		}
	}
	index := make(map[string]*rule, len(rules))
	for _, r := range rules {
		index[r.api.ID] = r
	}
	return func(id string) *rule { return index[id] }
}

// changeIsolation moves the isolation of a policy from its old applied-to group to its
// new one (either may be nil).
func (m *model) changeIsolation(old, nu *policyState) {
	for d := range nu.isolates {
		if nu.appliedTo != nil && nu.isolates[d] {
			m.setIsolating(nu.appliedTo, d, 1)
		}
		if old.appliedTo != nil && old.isolates[d] {
			m.setIsolating(old.appliedTo, d, -1)
		}
	}
}

// attachRule makes r apply to the pods of its group, on every node they are on.
func (m *model) attachRule(r *rule) {
	g := r.appliedTo
	first := len(g.rules) == 0
	r.slot = len(g.rules)
	g.rules = append(g.rules, r)
	g.ruleMap = nil
	var added []*addrSet
	for _, a := range r.peers {
		if g.countAddr(a, 1) == 1 {
			added = append(added, a)
		}
	}
	g.members.nodes(func(n *node) {
		if first {
			m.groupArrives(g, n)
			return
		}
		for _, a := range added {
			m.addrRef(n, a, 1)
		}
		m.emitRule(n, r, opAdd)
	})
}

// detachRule undoes attachRule.
func (m *model) detachRule(r *rule) {
	g := r.appliedTo
	last := len(g.rules) == 1
	if last {
		g.members.nodes(func(n *node) { m.groupLeaves(g, n) })
	}
	end := len(g.rules) - 1
	g.rules[r.slot] = g.rules[end]
	g.rules[r.slot].slot = r.slot
	g.rules[end] = nil
	g.rules = g.rules[:end]
	g.ruleMap = nil
	var removed []*addrSet
	for _, a := range r.peers {
		if g.countAddr(a, -1) == 0 {
			removed = append(removed, a)
		}
	}
	if last {
		return
	}
	g.members.nodes(func(n *node) {
		for _, a := range removed {
			m.addrRef(n, a, -1)
		}
		m.emitRule(n, r, opRemove)
	})
}

// countAddr adds delta to the count of g's rules referencing a and returns the count.
func (g *group) countAddr(a *addrSet, delta int) int {
	for i := range g.addrRefs {
		if ar := &g.addrRefs[i]; ar.set == a {
			ar.count += delta
			if ar.count > 0 {
				return ar.count
			}
			last := len(g.addrRefs) - 1
			g.addrRefs[i] = g.addrRefs[last]
			g.addrRefs = g.addrRefs[:last]
			return 0
		}
	}
	g.addrRefs = append(g.addrRefs, addrRef{set: a, count: delta})
	return delta
}
