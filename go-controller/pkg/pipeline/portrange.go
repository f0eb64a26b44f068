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
// Masks that are not prefixes can occasionally cover a range with fewer matches (1-6 in
// three instead of four); kovs keeps prefixes, which stay readable in dump-flows and
// traces, and cost at most 2*16-2 flows per range.
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
