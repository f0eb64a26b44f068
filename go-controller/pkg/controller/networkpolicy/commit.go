package networkpolicy

import (
	"net/netip"

	"github.com/kovs-net/kovs/go-controller/pkg/policy"
)

// commit ends a batch of changes: it compiles again the policies whose named ports now
// resolve differently (not those whose bases changed members but resolve the same),
// recomputes the addresses of the groups whose members changed
// (sending patches to the nodes that hold them), and moves to the next generation, which
// becomes the generation of every node whose share changed. It returns the subscribers
// of those nodes.
func (m *model) commit() []*subscriber {
	for round := 0; len(m.batch.dirtyPolicies) > 0 && round < 3; round++ {
		dirty := m.batch.dirtyPolicies
		m.batch.dirtyPolicies = map[*policyState]struct{}{}
		for ps := range dirty {
			if m.policies[ps.key] == ps && !ps.resolvesAsCompiled() {
				m.setPolicy(ps.key, ps.np)
			}
		}
	}
	for _, g := range m.batch.changedGroups {
		g.changed = false
		if g.addr != nil && g.refs > 0 {
			m.updateAddresses(g)
		}
	}
	if m.batch.changed || len(m.batch.touched) > 0 {
		m.generation++
	}
	// Every subscriber of a touched node is behind it now, even one whose events cancelled
	// out: it gets a delta that only moves its generation.
	var notify []*subscriber
	for n := range m.batch.touched {
		n.generation = m.generation
		notify = append(notify, n.subs...)
		for _, s := range n.subs {
			if s.behind != nil {
				s.behind[s] = struct{}{}
			}
		}
	}
	m.batch = newBatch()
	return notify
}

// updateAddresses patches the watched nodes that hold a group's address set with the
// addresses that appeared and disappeared in the batch. A large set counts its members'
// addresses, and its whole list is rebuilt only when one is needed (addrSet.list); a
// small one lists them again.
func (m *model) updateAddresses(g *group) {
	a := g.addr
	if a.count == nil {
		addrs := g.addresses()
		added, removed := policy.DiffPrefixes(a.addrs, addrs)
		a.addrs = addrs
		m.patchHolders(a, added, removed)
		if len(addrs) >= countedMin {
			a.startCounting()
		}
		return
	}
	if len(a.diff) == 0 {
		return
	}
	var added, removed []netip.Prefix
	for pfx, d := range a.diff {
		if d > 0 {
			added = append(added, pfx)
		} else {
			removed = append(removed, pfx)
		}
	}
	a.diff = map[netip.Prefix]int8{} // a new map: clearing one costs its largest size
	a.stale = true
	m.patchHolders(a, policy.SortPrefixes(added), policy.SortPrefixes(removed))
}

// patchHolders patches the watched nodes that hold a.
func (m *model) patchHolders(a *addrSet, added, removed []netip.Prefix) {
	if len(added)+len(removed) == 0 {
		return
	}
	for n := range a.holders {
		if len(n.subs) > 0 {
			m.emitPatch(n, a, added, removed)
		}
	}
}

// addresses returns the sorted addresses of g's members (those in its scope).
func (g *group) addresses() []netip.Prefix {
	out := make([]netip.Prefix, 0, g.members.size)
	g.members.each(func(p *pod) {
		for _, ip := range p.ips {
			if g.inScope(ip) {
				out = append(out, policy.HostPrefix(ip))
			}
		}
	})
	return policy.SortPrefixes(out)
}
