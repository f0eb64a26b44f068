package networkpolicy

import (
	"net/netip"
	"slices"

	"github.com/kovs-net/kovs/go-controller/pkg/labelindex"
	"github.com/kovs-net/kovs/go-controller/pkg/policy"
)

// acquire returns the group of spec, creating and filling it if needed, and records a
// reference to it held by ps.
func (m *model) acquire(ps *policyState, spec groupSpec) *group {
	key := spec.key()
	g, ok := m.groups[key]
	if !ok {
		g = m.newGroup(key, spec)
	}
	g.refs++
	ps.groups = append(ps.groups, g)
	return g
}

// newGroup interns a group and fills it from the pods in its scope.
func (m *model) newGroup(key groupKey, spec groupSpec) *group {
	g := &group{groupSpec: spec, id: setID("s-", key.String())}
	m.groups[key] = g
	if g.nsSelector == nil {
		idx := m.nsGroups[g.scope]
		if idx == nil {
			idx = map[*group]struct{}{}
			m.nsGroups[g.scope] = idx
		}
		idx[g] = struct{}{}
		if ns := m.namespaces[g.scope]; ns != nil {
			m.fill(g, ns)
		}
		return g
	}
	m.clusterGroups.Add(g, g.nsSelector)
	label, values := labelindex.RequiredValues(g.nsSelector)
	if label == "" {
		for _, ns := range m.namespaces {
			if g.nsSelector.Matches(ns.labels) {
				m.fill(g, ns)
			}
		}
		return g
	}
	for _, v := range values { // a namespace has one value of label: it is found once
		for ns := range m.nsByLabel[[2]string{label, v}] {
			if g.nsSelector.Matches(ns.labels) {
				m.fill(g, ns)
			}
		}
	}
	return g
}

func (m *model) fill(g *group, ns *namespace) {
	for p := range ns.pods {
		if g.matchesPod(p) {
			m.addMember(g, p)
		}
	}
}

// peerSet returns the group's address set, creating it on first use as a peer.
func (m *model) peerSet(g *group) *addrSet {
	if g.addr == nil {
		g.addr = &addrSet{id: g.id, group: g}
		m.groupChanged(g) // its addresses are computed at commit
	}
	return g.addr
}

// countedMin is the number of addresses from which a group's set counts its members'
// addresses rather than listing them again at every batch that changed its members: a
// map per set costs more memory than rebuilding a short list costs time. (A variable for
// the tests, which take both paths.)
var countedMin = 64

// startCounting makes a's changes incremental from now on; a.addrs must be up to date.
func (a *addrSet) startCounting() {
	a.count = make(map[netip.Prefix]int32, len(a.addrs))
	a.diff = map[netip.Prefix]int8{}
	a.group.members.each(func(p *pod) { a.group.countAddrs(p, 1) })
	a.diff = map[netip.Prefix]int8{} // a new map: clearing one costs its largest size
}

// countAddrs counts (delta 1) or uncounts (-1) the addresses of member p in g's address
// set, if g has one that counts, recording those that appear or disappear in the batch's diff.
func (g *group) countAddrs(p *pod, delta int32) {
	a := g.addr
	if a == nil || a.count == nil {
		return
	}
	for _, ip := range p.ips {
		if !g.inScope(ip) {
			continue
		}
		pfx := policy.HostPrefix(ip)
		c := a.count[pfx] + delta
		switch {
		case c == 0:
			delete(a.count, pfx)
			a.diffAdd(pfx, -1)
		case c == 1 && delta > 0:
			a.count[pfx] = c
			a.diffAdd(pfx, 1)
		default:
			a.count[pfx] = c
		}
	}
}

func (a *addrSet) diffAdd(pfx netip.Prefix, d int8) {
	if v := a.diff[pfx] + d; v == 0 {
		delete(a.diff, pfx)
	} else {
		a.diff[pfx] = v
	}
}

// list returns the set's addresses, sorted: rebuilt from the counts if they changed since
// it was last built. Safe under the model's read lock.
func (a *addrSet) list() []netip.Prefix {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.stale {
		addrs := make([]netip.Prefix, 0, len(a.count))
		for pfx := range a.count {
			addrs = append(addrs, pfx)
		}
		a.addrs, a.stale = policy.SortPrefixes(addrs), false
	}
	return a.addrs
}

// release drops the references ps holds, deleting what nobody references any more.
func (m *model) release(ps *policyState) {
	for _, u := range ps.portUses {
		u.count.release(ps)
	}
	for _, g := range ps.groups {
		if g.refs--; g.refs == 0 {
			m.deleteGroup(g)
		}
	}
	for _, b := range ps.blocks {
		if b.refs--; b.refs == 0 {
			delete(m.blocks, b.key)
		}
	}
	ps.groups, ps.blocks, ps.portUses = nil, nil, nil
}

// deleteGroup forgets a group nobody references: it has no rules and isolates nothing.
func (m *model) deleteGroup(g *group) {
	g.members.each(func(p *pod) { p.leave(g) })
	delete(m.groups, g.key())
	if g.nsSelector == nil {
		idx := m.nsGroups[g.scope]
		delete(idx, g)
		if len(idx) == 0 {
			delete(m.nsGroups, g.scope)
		}
	} else {
		m.clusterGroups.Remove(g)
	}
	g.members = memberSet{}
}

// matchesPod reports whether the pod belongs in the group.
func (g *group) matchesPod(p *pod) bool {
	if g.nsSelector == nil {
		if p.ns.name != g.scope {
			return false
		}
	} else if !g.nsSelector.Matches(p.ns.labels) {
		return false
	}
	if !g.selector.Matches(p.labels) {
		return false
	}
	if g.within != nil && !slices.ContainsFunc(p.ips, g.inScope) {
		return false
	}
	return g.ports == nil || p.resolves(g.ports.protocol, g.ports.names, g.ports.number)
}

// addMember adds p to g (and g to p.groups), with the consequences on p's node.
func (m *model) addMember(g *group, p *pod) {
	p.groups = append(p.groups, g)
	first := g.members.add(p)
	g.countAddrs(p, 1)
	m.countPorts(g, p, 1)
	m.groupChanged(g)
	for d := range g.isolating {
		if g.isolating[d] > 0 {
			m.isolate(p, d, 1)
		}
	}
	if p.node == nil || len(g.rules) == 0 {
		return
	}
	if first {
		m.groupArrives(g, p.node)
	} else {
		m.emitAppliedTo(p.node, g, opUpdate)
	}
}

// removeMember removes p from g, with the consequences on p's node. The caller removes g
// from p.groups.
func (m *model) removeMember(g *group, p *pod) {
	last := g.members.remove(p)
	g.countAddrs(p, -1)
	m.countPorts(g, p, -1)
	m.groupChanged(g)
	for d := range g.isolating {
		if g.isolating[d] > 0 {
			m.isolate(p, d, -1)
		}
	}
	if p.node == nil || len(g.rules) == 0 {
		return
	}
	if last {
		m.groupLeaves(g, p.node)
	} else {
		m.emitAppliedTo(p.node, g, opUpdate)
	}
}

// memberChanged records that a member of g changed addresses.
func (m *model) memberChanged(g *group, p *pod) {
	m.groupChanged(g)
	if p.node != nil && len(g.rules) > 0 {
		m.emitAppliedTo(p.node, g, opUpdate)
	}
}

// groupChanged marks g's membership changed in this batch: its addresses are recomputed
// at commit. (The policies that split named ports over it are compiled again only if the
// numbers change: countPorts.)
func (m *model) groupChanged(g *group) {
	if !g.changed {
		g.changed = true
		m.batch.changedGroups = append(m.batch.changedGroups, g)
	}
}

// groupArrives makes g part of n's share: its applied-to set, its rules and the
// address sets they reference.
func (m *model) groupArrives(g *group, n *node) {
	n.groups[g] = struct{}{}
	for _, ar := range g.addrRefs {
		m.addrRef(n, ar.set, 1)
	}
	if len(n.subs) == 0 {
		return
	}
	m.emitAppliedTo(n, g, opAdd)
	for _, r := range g.rules {
		m.emitRule(n, r, opAdd)
	}
}

// groupLeaves takes g out of n's share.
func (m *model) groupLeaves(g *group, n *node) {
	delete(n.groups, g)
	for _, ar := range g.addrRefs {
		m.addrRef(n, ar.set, -1)
	}
	if len(n.subs) == 0 {
		return
	}
	m.emitAppliedTo(n, g, opRemove)
	for _, r := range g.rules {
		m.emitRule(n, r, opRemove)
	}
}

// addrRef counts one more (or one less) group of n referencing a.
func (m *model) addrRef(n *node, a *addrSet, delta int) {
	c := n.addrRefs[a] + delta
	switch {
	case c == 0:
		delete(n.addrRefs, a)
		delete(a.holders, n)
		m.emitAddr(n, a, opRemove)
	case c == 1 && delta > 0:
		n.addrRefs[a] = c
		if a.holders == nil {
			a.holders = map[*node]struct{}{}
		}
		a.holders[n] = struct{}{}
		m.emitAddr(n, a, opAdd)
	default:
		n.addrRefs[a] = c
	}
}

// isolate counts one more (or one less) isolating group of p in direction d.
func (m *model) isolate(p *pod, d int, delta int32) {
	before := p.isolating[d]
	p.isolating[d] += delta
	if (before == 0) != (p.isolating[d] == 0) && p.node != nil {
		m.emitIsolation(p.node)
	}
}

// setIsolating counts one more (or one less) policy isolating g's pods in direction d.
func (m *model) setIsolating(g *group, d int, delta int32) {
	before := g.isolating[d]
	g.isolating[d] += delta
	if (before == 0) == (g.isolating[d] == 0) {
		return
	}
	g.members.each(func(p *pod) { m.isolate(p, d, delta) })
}
