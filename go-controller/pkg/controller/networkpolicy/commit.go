package networkpolicy

import (
	"net/netip"

	"github.com/kovs-net/kovs/go-controller/pkg/policy"
)

// commit ends a batch of changes: it compiles again the policies whose named ports may
// now resolve differently, recomputes the addresses of the groups whose members changed
// (sending patches to the nodes that hold them), and moves to the next generation, which
// becomes the generation of every node whose share changed. It returns the subscribers
// of those nodes.
func (m *model) commit() []*subscriber {
	for round := 0; len(m.batch.dirtyPolicies) > 0 && round < 3; round++ {
		dirty := m.batch.dirtyPolicies
		m.batch.dirtyPolicies = map[*policyState]struct{}{}
		for ps := range dirty {
			if m.policies[ps.key] == ps {
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
	}
	m.batch = newBatch()
	return notify
}

// updateAddresses recomputes a group's addresses and patches the watched nodes that hold
// them.
func (m *model) updateAddresses(g *group) {
	addrs := g.addresses()
	added, removed := policy.DiffPrefixes(g.addr.addrs, addrs)
	if len(added)+len(removed) == 0 {
		return
	}
	g.addr.addrs = addrs
	for n := range g.addr.holders {
		if len(n.subs) > 0 {
			m.emitPatch(n, g.addr, added, removed)
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
