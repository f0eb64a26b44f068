package policy

import (
	"net/netip"
	"slices"
)

// The meet of two shares of one node, old (what it enforces, or has been sent) and new
// (what it is to enforce next), is a share that allows nothing that either does not allow: a
// connection the meet lets out of or into a pod, both old and new let through there.
// It is computed entry by entry over the entries that differ, and comes as close to the
// exact intersection as one share can say it:
//
//   - an address set present in both holds the addresses in both (prefixes intersected);
//   - an applied-to set present in both holds the pods in both;
//   - the evaluated pods are those listed by both: a pod new to the node stays closed;
//   - isolation is the union of both over the pods the meet lists: a pod isolated by
//     either is isolated (a pod it does not list is closed anyway);
//   - a rule present in both, with the same applied-to set, keeps the ports and peers
//     both admit (a rule that would admit nothing is left out);
//   - a rule present only in new is kept when none of the pods it applies to in the meet
//     was isolated in its direction in old, nor the subject of a Baseline rule there (old
//     let their traffic through whole, so the rule's own limits are the meet: a new
//     policy on unisolated pods is exact at once); and a rule present only in old when
//     the same holds of new (a policy being deleted keeps allowing what it allowed until
//     the others have its restrictions);
//   - any other rule is left out: safe, and the relaxed rule comes with the new share.
//
//   - the cluster rules are the tiered meet of both lists (MeetClusterRules).
//
// Sets present in one share only are kept as they are: they admit nothing by
// themselves, and the rules kept from that share name them.

// Gone lists pods that no longer exist (deleted, or terminated) and their addresses. A
// meet keeps them where old had them: nothing can connect from or to a pod that is gone
// (its addresses are not handed out again within the quarantine), so dropping them is
// no restriction to wait for.
type Gone struct {
	Pods      map[PodKey]struct{}
	Addresses map[netip.Prefix]struct{}
}

// Add lists a pod and its addresses.
func (g *Gone) Add(k PodKey, ips []netip.Addr) {
	if g.Pods == nil {
		g.Pods, g.Addresses = map[PodKey]struct{}{}, map[netip.Prefix]struct{}{}
	}
	g.Pods[k] = struct{}{}
	for _, ip := range ips {
		g.Addresses[HostPrefix(ip)] = struct{}{}
	}
}

// Merge lists what o lists too.
func (g *Gone) Merge(o Gone) {
	if len(o.Pods)+len(o.Addresses) == 0 {
		return
	}
	if g.Pods == nil {
		g.Pods, g.Addresses = map[PodKey]struct{}{}, map[netip.Prefix]struct{}{}
	}
	for k := range o.Pods {
		g.Pods[k] = struct{}{}
	}
	for a := range o.Addresses {
		g.Addresses[a] = struct{}{}
	}
}

// Meet returns the meet of two shares of one node at new's generation: it allows only
// what both allow (see above).
func Meet(old, nu NodeShare) NodeShare {
	c := NewChanges()
	c.Isolation, c.Pods, c.ClusterRules = true, true, true
	for id := range old.AddressSets {
		c.Entries[EntryKey{AddressSetEntry, id}] = struct{}{}
	}
	for id := range nu.AddressSets {
		c.Entries[EntryKey{AddressSetEntry, id}] = struct{}{}
	}
	for id := range old.AppliedToSets {
		c.Entries[EntryKey{AppliedToSetEntry, id}] = struct{}{}
	}
	for id := range nu.AppliedToSets {
		c.Entries[EntryKey{AppliedToSetEntry, id}] = struct{}{}
	}
	for id := range old.Rules {
		c.Entries[EntryKey{RuleEntry, id}] = struct{}{}
	}
	for id := range nu.Rules {
		c.Entries[EntryKey{RuleEntry, id}] = struct{}{}
	}
	m := MeetOver(&old, &nu, c, Gone{}, nil)
	out := NewNodeShare(nu.Node)
	out.Generation = nu.Generation
	for k, e := range m.Entries {
		out.SetEntry(k, e)
	}
	out.Isolation, out.Pods, out.ClusterRules = m.Isolation, m.Pods, m.ClusterRules
	return out
}

// EntryKind tells which map of a share an entry lives in.
type EntryKind uint8

// The kinds of entries.
const (
	AddressSetEntry EntryKind = iota
	AppliedToSetEntry
	RuleEntry
)

// EntryKey names one Entry of a share.
type EntryKey struct {
	Kind EntryKind
	ID   string
}

// Changes lists what may differ between two shares of a node.
type Changes struct {
	Entries   map[EntryKey]struct{}
	Isolation bool
	Pods      bool
	// ClusterRules: the cluster rules may differ.
	ClusterRules bool
}

// NewChanges returns an empty list.
func NewChanges() Changes { return Changes{Entries: map[EntryKey]struct{}{}} }

// Empty reports whether nothing is listed.
func (c Changes) Empty() bool {
	return len(c.Entries) == 0 && !c.Isolation && !c.Pods && !c.ClusterRules
}

// Add lists what o lists too.
func (c *Changes) Add(o Changes) {
	for k := range o.Entries {
		c.Entries[k] = struct{}{}
	}
	c.Isolation = c.Isolation || o.Isolation
	c.Pods = c.Pods || o.Pods
	c.ClusterRules = c.ClusterRules || o.ClusterRules
}

// DeltaChanges lists what a delta changes.
func DeltaChanges(d Delta) Changes {
	c := NewChanges()
	for _, s := range d.AddedAddressSets {
		c.Entries[EntryKey{AddressSetEntry, s.ID}] = struct{}{}
	}
	for _, p := range d.UpdatedAddressSets {
		c.Entries[EntryKey{AddressSetEntry, p.ID}] = struct{}{}
	}
	for _, id := range d.RemovedAddressSets {
		c.Entries[EntryKey{AddressSetEntry, id}] = struct{}{}
	}
	for _, s := range d.AddedAppliedToSets {
		c.Entries[EntryKey{AppliedToSetEntry, s.ID}] = struct{}{}
	}
	for _, s := range d.UpdatedAppliedToSets {
		c.Entries[EntryKey{AppliedToSetEntry, s.ID}] = struct{}{}
	}
	for _, id := range d.RemovedAppliedToSets {
		c.Entries[EntryKey{AppliedToSetEntry, id}] = struct{}{}
	}
	for _, r := range d.AddedRules {
		c.Entries[EntryKey{RuleEntry, r.ID}] = struct{}{}
	}
	for _, r := range d.UpdatedRules {
		c.Entries[EntryKey{RuleEntry, r.ID}] = struct{}{}
	}
	for _, id := range d.RemovedRules {
		c.Entries[EntryKey{RuleEntry, id}] = struct{}{}
	}
	c.Isolation = d.Isolation != nil
	c.Pods = len(d.AddedPods)+len(d.RemovedPods) > 0
	c.ClusterRules = d.ClusterRules != nil
	return c
}

// Entry is the value of one entry of a share, or its absence.
type Entry struct {
	Present      bool
	AddressSet   AddressSet
	AppliedToSet AppliedToSet
	Rule         Rule
}

// Entry returns the share's entry k.
func (s *NodeShare) Entry(k EntryKey) Entry {
	switch k.Kind {
	case AddressSetEntry:
		v, ok := s.AddressSets[k.ID]
		return Entry{Present: ok, AddressSet: v}
	case AppliedToSetEntry:
		v, ok := s.AppliedToSets[k.ID]
		return Entry{Present: ok, AppliedToSet: v}
	default:
		v, ok := s.Rules[k.ID]
		return Entry{Present: ok, Rule: v}
	}
}

// SetEntry sets (or, when absent, deletes) the share's entry k.
func (s *NodeShare) SetEntry(k EntryKey, e Entry) {
	switch {
	case k.Kind == AddressSetEntry && e.Present:
		s.AddressSets[k.ID] = e.AddressSet
	case k.Kind == AddressSetEntry:
		delete(s.AddressSets, k.ID)
	case k.Kind == AppliedToSetEntry && e.Present:
		s.AppliedToSets[k.ID] = e.AppliedToSet
	case k.Kind == AppliedToSetEntry:
		delete(s.AppliedToSets, k.ID)
	case e.Present:
		s.Rules[k.ID] = e.Rule
	default:
		delete(s.Rules, k.ID)
	}
}

// Equal reports whether two entries of kind k are the same.
func (e Entry) Equal(o Entry, k EntryKind) bool {
	switch {
	case e.Present != o.Present:
		return false
	case !e.Present:
		return true
	case k == AddressSetEntry:
		return slices.Equal(e.AddressSet.Addresses, o.AddressSet.Addresses)
	case k == AppliedToSetEntry:
		return slices.EqualFunc(e.AppliedToSet.Pods, o.AppliedToSet.Pods, func(a, b AppliedPod) bool {
			return a.PodKey == b.PodKey && slices.Equal(a.IPs, b.IPs)
		})
	default:
		return e.Rule.Equal(o.Rule)
	}
}

// MeetResult is the meet of two shares over what differs between them.
type MeetResult struct {
	Entries      map[EntryKey]Entry
	Isolation    Isolation
	Pods         []PodKey
	ClusterRules []ClusterRule
}

// MeetOver returns the entries, isolation and pods of the meet of old and new over what c
// lists (everything else must be the same in both); what old has of the pods and
// addresses of gone, it keeps. A memo (nil: none) shares the address lists of the meet
// with the other nodes' meets of the same lists over the same gone.
func MeetOver(old, nu *NodeShare, c Changes, gone Gone, memo *SetMemo) MeetResult {
	m := MeetResult{Entries: make(map[EntryKey]Entry, len(c.Entries)), Isolation: old.Isolation, Pods: old.Pods,
		ClusterRules: old.ClusterRules}
	if c.ClusterRules {
		m.ClusterRules = MeetClusterRules(old.ClusterRules, nu.ClusterRules)
	}
	if c.Pods {
		m.Pods = intersectKeys(old.Pods, nu.Pods)
		for _, k := range old.Pods {
			if _, ok := gone.Pods[k]; ok {
				m.Pods = append(m.Pods, k)
			}
		}
		slices.SortFunc(m.Pods, PodKey.Compare)
		m.Pods = slices.Compact(m.Pods)
	}
	if c.Isolation {
		// A pod the meet does not list is closed whatever its isolation: new's isolation
		// of a pod new to the node waits for new itself, so that a new pod is no
		// restriction to wait for.
		m.Isolation = Isolation{
			Ingress: unionKeys(old.Isolation.Ingress, intersectKeys(nu.Isolation.Ingress, m.Pods)),
			Egress:  unionKeys(old.Isolation.Egress, intersectKeys(nu.Isolation.Egress, m.Pods)),
		}
	}
	for k := range c.Entries {
		if k.Kind != RuleEntry {
			m.Entries[k] = meetSet(k, old.Entry(k), nu.Entry(k), gone, memo)
		}
	}
	appliedTo := func(id string) AppliedToSet {
		if e, ok := m.Entries[EntryKey{AppliedToSetEntry, id}]; ok {
			return e.AppliedToSet
		}
		return old.AppliedToSets[id]
	}
	// unisolated reports whether share s let the traffic of every pod the rule applies
	// to in the meet through whole in the rule's direction, as far as NetworkPolicy and
	// Baseline go: no such pod is isolated there, nor a subject of a Baseline rule there
	// (whose traffic s sent to that rule instead).
	unisolated := func(r Rule, s *NodeShare) bool {
		for _, p := range appliedTo(r.AppliedTo).Pods {
			if s.Isolation.Isolated(r.Direction, p.Namespace, p.Name) || s.hasBaseline(r.Direction, p.PodKey) {
				return false
			}
		}
		return true
	}
	for k := range c.Entries {
		if k.Kind != RuleEntry {
			continue
		}
		o, n := old.Entry(k), nu.Entry(k)
		switch {
		case o.Present && n.Present:
			r, ok := meetRule(o.Rule, n.Rule)
			m.Entries[k] = Entry{Present: ok, Rule: r}
		case n.Present:
			m.Entries[k] = Entry{Present: unisolated(n.Rule, old), Rule: n.Rule}
		case o.Present:
			m.Entries[k] = Entry{Present: unisolated(o.Rule, nu), Rule: o.Rule}
		default:
			m.Entries[k] = Entry{}
		}
	}
	return m
}

// meetSet is the meet of one address or applied-to set.
func meetSet(k EntryKey, o, n Entry, gone Gone, memo *SetMemo) Entry {
	switch {
	case !o.Present:
		return n
	case !n.Present:
		return o
	case k.Kind == AddressSetEntry:
		addrs := memo.meetAddresses(o.AddressSet.Addresses, n.AddressSet.Addresses, gone)
		return Entry{Present: true, AddressSet: AddressSet{ID: k.ID, Addresses: addrs}}
	default:
		set := AppliedToSet{ID: k.ID}
		for _, p := range n.AppliedToSet.Pods {
			if slices.ContainsFunc(o.AppliedToSet.Pods, func(q AppliedPod) bool { return q.PodKey == p.PodKey }) {
				set.Pods = append(set.Pods, p)
			}
		}
		for _, p := range o.AppliedToSet.Pods {
			if _, ok := gone.Pods[p.PodKey]; ok && !slices.ContainsFunc(set.Pods, func(q AppliedPod) bool { return q.PodKey == p.PodKey }) {
				set.Pods = append(set.Pods, p)
			}
		}
		slices.SortFunc(set.Pods, func(a, b AppliedPod) int { return a.PodKey.Compare(b.PodKey) })
		return Entry{Present: true, AppliedToSet: set}
	}
}

// meetRule is the rule that admits what both admit, when one rule can say it.
func meetRule(o, n Rule) (Rule, bool) {
	if o.Equal(n) {
		return n, true
	}
	if o.AppliedTo != n.AppliedTo || o.Direction != n.Direction || o.Action != n.Action {
		return Rule{}, false
	}
	ports, ok := MeetPorts(o.Ports, n.Ports)
	if !ok {
		return Rule{}, false
	}
	peers, ok := meetPeers(o.Peers, n.Peers)
	if !ok {
		return Rule{}, false
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

// MeetPorts is the ports both lists admit (ok false: none). No ports means every port of
// every protocol; a Port of 0 every port of its protocol.
func MeetPorts(a, b []Port) ([]Port, bool) {
	switch {
	case len(a) == 0:
		return b, true
	case len(b) == 0:
		return a, true
	}
	var out []Port
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
			p := Port{Protocol: x.Protocol}
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

func portRange(p Port) (int32, int32) {
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
	return SortPrefixes(out)
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

func unionKeys(a, b []PodKey) []PodKey {
	out := append(slices.Clone(a), b...)
	slices.SortFunc(out, PodKey.Compare)
	return slices.Compact(out)
}

func intersectKeys(a, b []PodKey) []PodKey {
	var out []PodKey
	for _, k := range a {
		if _, ok := slices.BinarySearchFunc(b, k, PodKey.Compare); ok {
			out = append(out, k)
		}
	}
	return out
}
