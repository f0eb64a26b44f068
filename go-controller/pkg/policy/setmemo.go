package policy

import (
	"net/netip"
	"slices"
)

// SetMemo remembers the results of operations on address lists by the identity of their
// inputs, for a caller that repeats the same operation for every node holding a set: the
// transition gate patches, meets and compares the set of a change on each of its
// holders, and the realization tracker patches its copy of each. Without the memo each
// holder pays for, and keeps, its own copy of the whole list: a set all n nodes hold,
// changed by one address, cost O(n) per node and O(n²) in all (an address into a set of
// 5,000 nodes took 27 s of kovs-controller's time, and its peak RSS reached 8 GiB). With
// it, holders given the same list get the same result, the same backing array: the work
// is done once per change, and the nodes share one copy.
//
// Identity stands for content because no list of a share is ever changed in place (see
// NodeShare.Clone): two slices with the same first element's address and length hold the
// same addresses. A memo keeps its inputs and results alive: drop it (a new one per
// transition step in the gate) or let it Reset when it grows.
//
// A nil *SetMemo computes every operation afresh. A memo is not safe for concurrent use.
type SetMemo struct {
	patched map[patchKey][]netip.Prefix
	met     map[pairKey][]netip.Prefix
	equal   map[pairKey]bool
	diffs   map[pairKey]prefixDiff
}

// listID is a list's identity: where its elements are, and how many.
type listID struct {
	first *netip.Prefix
	n     int
}

func idOf(l []netip.Prefix) listID {
	if len(l) == 0 {
		return listID{}
	}
	return listID{&l[0], len(l)}
}

// patchKey is a list and a patch's content (a patch is small, and every holder's delta
// carries its own copy).
type patchKey struct {
	set   listID
	patch string
}

type pairKey struct{ a, b listID }

type prefixDiff struct{ added, removed []netip.Prefix }

// NewSetMemo returns an empty memo.
func NewSetMemo() *SetMemo {
	m := &SetMemo{}
	m.Reset()
	return m
}

// Reset forgets every result.
func (m *SetMemo) Reset() {
	m.patched, m.met = map[patchKey][]netip.Prefix{}, map[pairKey][]netip.Prefix{}
	m.equal, m.diffs = map[pairKey]bool{}, map[pairKey]prefixDiff{}
}

// Len is how many results the memo holds.
func (m *SetMemo) Len() int {
	if m == nil {
		return 0
	}
	return len(m.patched) + len(m.met) + len(m.equal) + len(m.diffs)
}

// Patch is PatchPrefixes(set, added, removed).
func (m *SetMemo) Patch(set, added, removed []netip.Prefix) []netip.Prefix {
	if m == nil {
		return PatchPrefixes(set, added, removed)
	}
	b := make([]byte, 0, 20*(len(added)+len(removed))+1)
	for _, p := range added {
		b, _ = p.AppendBinary(b)
	}
	b = append(b, '/') // AppendBinary's lengths tell the prefixes apart; this the lists
	for _, p := range removed {
		b, _ = p.AppendBinary(b)
	}
	k := patchKey{idOf(set), string(b)}
	out, ok := m.patched[k]
	if !ok {
		out = PatchPrefixes(set, added, removed)
		m.patched[k] = out
	}
	return out
}

// Equal is slices.Equal(a, b), at once when a and b are the same list or differ in
// length.
func (m *SetMemo) Equal(a, b []netip.Prefix) bool {
	switch {
	case len(a) != len(b):
		return false
	case idOf(a) == idOf(b):
		return true
	case m == nil:
		return slices.Equal(a, b)
	}
	k := pairKey{idOf(a), idOf(b)}
	eq, ok := m.equal[k]
	if !ok {
		eq = slices.Equal(a, b)
		m.equal[k] = eq
	}
	return eq
}

// Diff is DiffPrefixes(old, nu); holders of the same lists share the result's slices.
func (m *SetMemo) Diff(old, nu []netip.Prefix) (added, removed []netip.Prefix) {
	if m == nil {
		return DiffPrefixes(old, nu)
	}
	k := pairKey{idOf(old), idOf(nu)}
	d, ok := m.diffs[k]
	if !ok {
		d.added, d.removed = DiffPrefixes(old, nu)
		m.diffs[k] = d
	}
	return d.added, d.removed
}

// EqualEntries is e.Equal(o, k), through the memo for address sets.
func (m *SetMemo) EqualEntries(e, o Entry, k EntryKind) bool {
	if k == AddressSetEntry && e.Present && o.Present {
		return m.Equal(e.AddressSet.Addresses, o.AddressSet.Addresses)
	}
	return e.Equal(o, k)
}

// meetAddresses is the addresses of both lists and those of old that gone lists; the
// result is old or nu itself when it holds the same addresses, so that comparing it with
// them costs nothing. gone must be the same for every call on one memo.
func (m *SetMemo) meetAddresses(old, nu []netip.Prefix, gone Gone) []netip.Prefix {
	if idOf(old) == idOf(nu) {
		return old
	}
	k := pairKey{idOf(old), idOf(nu)}
	if m != nil {
		if out, ok := m.met[k]; ok {
			return out
		}
	}
	addrs := IntersectPrefixes(old, nu)
	for _, a := range old {
		if _, ok := gone.Addresses[a]; ok {
			addrs = append(addrs, a)
		}
	}
	addrs = SortPrefixes(addrs)
	switch {
	case slices.Equal(addrs, old):
		addrs = old
	case slices.Equal(addrs, nu):
		addrs = nu
	}
	if m != nil {
		m.met[k] = addrs
	}
	return addrs
}
