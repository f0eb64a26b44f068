package policy

import (
	"net/netip"
	"slices"
)

// ComparePrefixes orders prefixes by address (IPv4 before IPv6), then by length.
func ComparePrefixes(a, b netip.Prefix) int {
	if c := a.Addr().Compare(b.Addr()); c != 0 {
		return c
	}
	return a.Bits() - b.Bits()
}

// HostPrefix returns the single-address prefix of ip: /32 for IPv4, /128 for IPv6.
func HostPrefix(ip netip.Addr) netip.Prefix {
	return netip.PrefixFrom(ip, ip.BitLen())
}

// SortPrefixes sorts p in place with ComparePrefixes and drops duplicates.
func SortPrefixes(p []netip.Prefix) []netip.Prefix {
	slices.SortFunc(p, ComparePrefixes)
	return slices.Compact(p)
}

// DiffPrefixes compares two sorted, duplicate-free lists and returns what new adds to
// old and what it removes from it, both sorted.
func DiffPrefixes(old, new []netip.Prefix) (added, removed []netip.Prefix) {
	i, j := 0, 0
	for i < len(old) && j < len(new) {
		switch c := ComparePrefixes(old[i], new[j]); {
		case c == 0:
			i++
			j++
		case c < 0:
			removed = append(removed, old[i])
			i++
		default:
			added = append(added, new[j])
			j++
		}
	}
	removed = append(removed, old[i:]...)
	added = append(added, new[j:]...)
	return added, removed
}

// PatchPrefixes returns the sorted list of set minus removed plus added (set sorted and
// duplicate-free). It never modifies set.
func PatchPrefixes(set, added, removed []netip.Prefix) []netip.Prefix {
	out := make([]netip.Prefix, 0, len(set)+len(added))
	gone := make(map[netip.Prefix]struct{}, len(removed))
	for _, p := range removed {
		gone[p] = struct{}{}
	}
	for _, p := range set {
		if _, ok := gone[p]; !ok {
			out = append(out, p)
		}
	}
	return SortPrefixes(append(out, added...))
}

// SubtractPrefixes returns cidr minus every prefix of except, as the minimal sorted list
// of prefixes that covers exactly the remaining addresses: each maximal aligned block
// that no exception touches. Exceptions of the other family, or outside cidr, subtract
// nothing; an exception that covers cidr leaves nothing.
func SubtractPrefixes(cidr netip.Prefix, except []netip.Prefix) []netip.Prefix {
	cidr = cidr.Masked()
	var relevant []netip.Prefix
	for _, e := range except {
		e = e.Masked()
		if e.Addr().Is4() == cidr.Addr().Is4() && e.Overlaps(cidr) {
			relevant = append(relevant, e)
		}
	}
	var out []netip.Prefix
	subtract(cidr, relevant, &out)
	return out
}

// subtract appends p minus except to out, splitting p in halves while an exception
// covers part of it. The halves come out in address order.
func subtract(p netip.Prefix, except []netip.Prefix, out *[]netip.Prefix) {
	var inside []netip.Prefix
	for _, e := range except {
		if e.Bits() <= p.Bits() && e.Contains(p.Addr()) {
			return // p is entirely excepted
		}
		if e.Overlaps(p) {
			inside = append(inside, e)
		}
	}
	if len(inside) == 0 {
		*out = append(*out, p)
		return
	}
	lo, hi := halves(p)
	subtract(lo, inside, out)
	subtract(hi, inside, out)
}

// halves splits p (shorter than a host prefix) into its two halves.
func halves(p netip.Prefix) (lo, hi netip.Prefix) {
	bits := p.Bits() + 1
	lo = netip.PrefixFrom(p.Addr(), bits)
	b := p.Addr().As16()
	pos := p.Bits()
	if p.Addr().Is4() {
		pos += 96
	}
	b[pos/8] |= 0x80 >> (pos % 8)
	hiAddr := netip.AddrFrom16(b)
	if p.Addr().Is4() {
		hiAddr = hiAddr.Unmap()
	}
	return lo, netip.PrefixFrom(hiAddr, bits)
}
