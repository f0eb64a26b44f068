package transition

import (
	"net/netip"
	"slices"

	"github.com/kovs-net/kovs/go-controller/pkg/policy"
)

// The meet of two shares of one node, old (what its receivers have been sent) and new
// (the compiler's), is a share that allows nothing that either does not allow: a
// connection the meet lets out of or into a pod, both old and new let through there.
// It is computed entry by entry over the entries that differ, and comes as close to the
// exact intersection as one share can say it:
//
//   - an address set present in both holds the addresses in both (prefixes intersected);
//   - an applied-to set present in both holds the pods in both;
//   - isolation is the union of both: a pod isolated by either is isolated;
//   - the evaluated pods are those listed by both: a pod new to the node stays closed;
//   - a rule present in both, with the same applied-to set, keeps the ports and peers
//     both admit (a rule that would admit nothing is left out);
//   - a rule present only in new is kept when none of the pods it applies to in the meet
//     was isolated in its direction in old (old let their traffic through whole, so the
//     rule's own limits are the meet: a new policy on unisolated pods is exact at once);
//     and a rule present only in old when none of them is isolated in new (a policy being
//     deleted keeps allowing what it allowed until the others have its restrictions);
//   - any other rule is left out: safe, and the relaxed rule comes with the new share.
//
// Sets present in one share only are kept as they are: they admit nothing by
// themselves, and the rules kept from that share name them.

// kind tells which map of a share an entry lives in.
type kind uint8

const (
	kindAddr kind = iota
	kindAppliedTo
	kindRule
)

// key names one entry of a share.
type key struct {
	kind kind
	id   string
}

// changed lists what may differ between two shares of a node.
type changed struct {
	entries   map[key]struct{}
	isolation bool
	pods      bool
}

func newChanged() changed { return changed{entries: map[key]struct{}{}} }

func (c changed) empty() bool { return len(c.entries) == 0 && !c.isolation && !c.pods }

func (c *changed) add(o changed) {
	for k := range o.entries {
		c.entries[k] = struct{}{}
	}
	c.isolation = c.isolation || o.isolation
	c.pods = c.pods || o.pods
}

// deltaChanged lists what a compiler delta changes.
func deltaChanged(d policy.Delta) changed {
	c := newChanged()
	for _, s := range d.AddedAddressSets {
		c.entries[key{kindAddr, s.ID}] = struct{}{}
	}
	for _, p := range d.UpdatedAddressSets {
		c.entries[key{kindAddr, p.ID}] = struct{}{}
	}
	for _, id := range d.RemovedAddressSets {
		c.entries[key{kindAddr, id}] = struct{}{}
	}
	for _, s := range d.AddedAppliedToSets {
		c.entries[key{kindAppliedTo, s.ID}] = struct{}{}
	}
	for _, s := range d.UpdatedAppliedToSets {
		c.entries[key{kindAppliedTo, s.ID}] = struct{}{}
	}
	for _, id := range d.RemovedAppliedToSets {
		c.entries[key{kindAppliedTo, id}] = struct{}{}
	}
	for _, r := range d.AddedRules {
		c.entries[key{kindRule, r.ID}] = struct{}{}
	}
	for _, r := range d.UpdatedRules {
		c.entries[key{kindRule, r.ID}] = struct{}{}
	}
	for _, id := range d.RemovedRules {
		c.entries[key{kindRule, id}] = struct{}{}
	}
	c.isolation = d.Isolation != nil
	c.pods = len(d.AddedPods)+len(d.RemovedPods) > 0
	return c
}

// entry is the value of one entry of a share, or its absence.
type entry struct {
	present   bool
	addr      policy.AddressSet
	appliedTo policy.AppliedToSet
	rule      policy.Rule
}

func get(s *policy.NodeShare, k key) entry {
	switch k.kind {
	case kindAddr:
		v, ok := s.AddressSets[k.id]
		return entry{present: ok, addr: v}
	case kindAppliedTo:
		v, ok := s.AppliedToSets[k.id]
		return entry{present: ok, appliedTo: v}
	default:
		v, ok := s.Rules[k.id]
		return entry{present: ok, rule: v}
	}
}

func put(s *policy.NodeShare, k key, e entry) {
	switch {
	case k.kind == kindAddr && e.present:
		s.AddressSets[k.id] = e.addr
	case k.kind == kindAddr:
		delete(s.AddressSets, k.id)
	case k.kind == kindAppliedTo && e.present:
		s.AppliedToSets[k.id] = e.appliedTo
	case k.kind == kindAppliedTo:
		delete(s.AppliedToSets, k.id)
	case e.present:
		s.Rules[k.id] = e.rule
	default:
		delete(s.Rules, k.id)
	}
}

func (e entry) equal(o entry, k kind) bool {
	switch {
	case e.present != o.present:
		return false
	case !e.present:
		return true
	case k == kindAddr:
		return slices.Equal(e.addr.Addresses, o.addr.Addresses)
	case k == kindAppliedTo:
		return slices.EqualFunc(e.appliedTo.Pods, o.appliedTo.Pods, func(a, b policy.AppliedPod) bool {
			return a.PodKey == b.PodKey && slices.Equal(a.IPs, b.IPs)
		})
	default:
		return e.rule.Equal(o.rule)
	}
}

// meetResult is the meet of two shares over what differs between them.
type meetResult struct {
	entries   map[key]entry
	isolation policy.Isolation
	pods      []policy.PodKey
}

// meet returns the entries, isolation and pods of the meet of old and new over what c
// names (everything else is the same in both).
func meet(old, nu *policy.NodeShare, c changed) meetResult {
	m := meetResult{entries: make(map[key]entry, len(c.entries)), isolation: old.Isolation, pods: old.Pods}
	if c.isolation {
		m.isolation = policy.Isolation{
			Ingress: unionKeys(old.Isolation.Ingress, nu.Isolation.Ingress),
			Egress:  unionKeys(old.Isolation.Egress, nu.Isolation.Egress),
		}
	}
	if c.pods {
		m.pods = intersectKeys(old.Pods, nu.Pods)
	}
	for k := range c.entries {
		if k.kind != kindRule {
			m.entries[k] = meetSet(k, get(old, k), get(nu, k))
		}
	}
	appliedTo := func(id string) policy.AppliedToSet {
		if e, ok := m.entries[key{kindAppliedTo, id}]; ok {
			return e.appliedTo
		}
		return old.AppliedToSets[id]
	}
	// unisolated reports whether no pod the rule applies to in the meet is isolated in
	// the rule's direction in share s.
	unisolated := func(r policy.Rule, s *policy.NodeShare) bool {
		for _, p := range appliedTo(r.AppliedTo).Pods {
			if s.Isolation.Isolated(r.Direction, p.Namespace, p.Name) {
				return false
			}
		}
		return true
	}
	for k := range c.entries {
		if k.kind != kindRule {
			continue
		}
		o, n := get(old, k), get(nu, k)
		switch {
		case o.present && n.present:
			r, ok := meetRule(o.rule, n.rule)
			m.entries[k] = entry{present: ok, rule: r}
		case n.present:
			m.entries[k] = entry{present: unisolated(n.rule, old), rule: n.rule}
		case o.present:
			m.entries[k] = entry{present: unisolated(o.rule, nu), rule: o.rule}
		default:
			m.entries[k] = entry{}
		}
	}
	return m
}

// meetSet is the meet of one address or applied-to set.
func meetSet(k key, o, n entry) entry {
	switch {
	case !o.present:
		return n
	case !n.present:
		return o
	case k.kind == kindAddr:
		return entry{present: true, addr: policy.AddressSet{ID: k.id, Addresses: IntersectPrefixes(o.addr.Addresses, n.addr.Addresses)}}
	default:
		set := policy.AppliedToSet{ID: k.id}
		for _, p := range n.appliedTo.Pods {
			if slices.ContainsFunc(o.appliedTo.Pods, func(q policy.AppliedPod) bool { return q.PodKey == p.PodKey }) {
				set.Pods = append(set.Pods, p)
			}
		}
		return entry{present: true, appliedTo: set}
	}
}

// meetRule is the rule that admits what both admit, when one rule can say it.
func meetRule(o, n policy.Rule) (policy.Rule, bool) {
	if o.Equal(n) {
		return n, true
	}
	if o.AppliedTo != n.AppliedTo || o.Direction != n.Direction || o.Action != n.Action {
		return policy.Rule{}, false
	}
	ports, ok := meetPorts(o.Ports, n.Ports)
	if !ok {
		return policy.Rule{}, false
	}
	peers, ok := meetPeers(o.Peers, n.Peers)
	if !ok {
		return policy.Rule{}, false
	}
	r := n
	r.Ports, r.Peers = ports, peers
	return r, true
}

// meetPeers: no peers means any address.
func meetPeers(a, b []string) ([]string, bool) {
	switch {
	case len(a) == 0:
		return b, true
	case len(b) == 0:
		return a, true
	}
	var out []string
	for _, id := range a {
		if slices.Contains(b, id) {
			out = append(out, id)
		}
	}
	return out, len(out) > 0
}

// meetPorts: no ports means every port of every protocol; a Port of 0 every port of its
// protocol.
func meetPorts(a, b []policy.Port) ([]policy.Port, bool) {
	switch {
	case len(a) == 0:
		return b, true
	case len(b) == 0:
		return a, true
	}
	var out []policy.Port
	for _, x := range a {
		for _, y := range b {
			if x.Protocol != y.Protocol {
				continue
			}
			xlo, xhi := portRange(x)
			ylo, yhi := portRange(y)
			lo, hi := max(xlo, ylo), min(xhi, yhi)
			if lo > hi {
				continue
			}
			p := policy.Port{Protocol: x.Protocol}
			switch {
			case lo == 0 && hi == 65535:
			case lo == hi:
				p.Port = lo
			default:
				p.Port, p.EndPort = lo, hi
			}
			if !slices.Contains(out, p) {
				out = append(out, p)
			}
		}
	}
	return out, len(out) > 0
}

func portRange(p policy.Port) (int32, int32) {
	switch {
	case p.Port == 0:
		return 0, 65535
	case p.EndPort == 0:
		return p.Port, p.Port
	default:
		return p.Port, p.EndPort
	}
}

// IntersectPrefixes returns the addresses in both sorted, duplicate-free lists, as a
// sorted list: each prefix of one list that a prefix of the other covers.
func IntersectPrefixes(a, b []netip.Prefix) []netip.Prefix {
	var out []netip.Prefix
	out = appendCovered(out, a, b)
	out = appendCovered(out, b, a)
	return policy.SortPrefixes(out)
}

// appendCovered appends every prefix of a that some prefix of b covers.
func appendCovered(out, a, b []netip.Prefix) []netip.Prefix {
	set := make(map[netip.Prefix]struct{}, len(b))
	lengths := map[int]struct{}{}
	for _, p := range b {
		set[p] = struct{}{}
		lengths[p.Bits()] = struct{}{}
	}
	for _, p := range a {
		for bits := range lengths {
			if bits > p.Bits() {
				continue
			}
			if _, ok := set[netip.PrefixFrom(p.Addr(), bits).Masked()]; ok {
				out = append(out, p)
				break
			}
		}
	}
	return out
}

func unionKeys(a, b []policy.PodKey) []policy.PodKey {
	out := append(slices.Clone(a), b...)
	slices.SortFunc(out, policy.PodKey.Compare)
	return slices.Compact(out)
}

func intersectKeys(a, b []policy.PodKey) []policy.PodKey {
	var out []policy.PodKey
	for _, k := range a {
		if _, ok := slices.BinarySearchFunc(b, k, policy.PodKey.Compare); ok {
			out = append(out, k)
		}
	}
	return out
}
