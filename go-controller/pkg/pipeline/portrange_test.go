package pipeline

import (
	"math/bits"
	"math/rand/v2"
	"testing"
)

// portRanges are the ranges the tests check: edges of the port space, aligned and
// unaligned blocks, and random ranges.
func portRanges() [][2]uint16 {
	ranges := [][2]uint16{{1, 1}, {1, 65535}, {0, 65535}, {80, 80}, {8000, 8080}, {1024, 65535}, {1, 1023},
		{32767, 32768}, {65535, 65535}, {0, 0}, {2, 65533}, {4096, 8191}, {4095, 8192}, {100, 99}}
	rng := rand.New(rand.NewPCG(1, 2))
	for range 300 {
		lo := uint16(rng.IntN(65536))
		span := rng.IntN(1 << (1 + rng.IntN(16)))
		ranges = append(ranges, [2]uint16{lo, uint16(min(int(lo)+span, 65535))})
	}
	return ranges
}

// TestPortRangeMasksMatchExactlyTheRange checks every port of the space against the
// matches of each range: a port matches one of them if and only if it is in the range.
func TestPortRangeMasksMatchExactlyTheRange(t *testing.T) {
	for _, r := range portRanges() {
		masks := PortRangeMasks(r[0], r[1])
		for p := 0; p <= 65535; p++ {
			in := uint16(p) >= r[0] && uint16(p) <= r[1]
			matched := 0
			for _, m := range masks {
				if m.Matches(uint16(p)) {
					matched++
				}
			}
			if (matched > 0) != in || matched > 1 {
				t.Fatalf("range %d-%d: port %d matched by %d of %v", r[0], r[1], p, matched, masks)
			}
		}
	}
}

// TestPortRangeMasksAreFewest compares the number of matches with the fewest prefix
// value/mask matches that cover the range exactly, found by brute force: a search over
// every way to cut the range into aligned power-of-two blocks.
func TestPortRangeMasksAreFewest(t *testing.T) {
	for _, r := range portRanges() {
		if r[0] > r[1] {
			if got := PortRangeMasks(r[0], r[1]); len(got) != 0 {
				t.Errorf("empty range %d-%d: %v", r[0], r[1], got)
			}
			continue
		}
		if int(r[1])-int(r[0]) > 1<<14 {
			continue // the brute force below is quadratic in the range's size
		}
		masks := PortRangeMasks(r[0], r[1])
		for _, m := range masks {
			if ones := bits.LeadingZeros16(^m.Mask); bits.OnesCount16(m.Mask) != ones {
				t.Errorf("range %d-%d: mask %#x is not a prefix", r[0], r[1], m.Mask)
			}
		}
		if want := fewestBlocks(int(r[0]), int(r[1])); len(masks) != want {
			t.Errorf("range %d-%d: %d matches %v, the fewest is %d", r[0], r[1], len(masks), masks, want)
		}
	}
}

// fewestBlocks is the fewest aligned power-of-two blocks covering exactly lo..hi, by
// dynamic programming over every block that could start at each port.
func fewestBlocks(lo, hi int) int {
	best := make([]int, hi-lo+2) // best[i]: fewest blocks for lo+i..hi
	for i := hi - lo; i >= 0; i-- {
		start := lo + i
		best[i] = 1 << 30
		for size := 1; size <= 65536 && start%size == 0 && start+size-1 <= hi; size *= 2 {
			best[i] = min(best[i], 1+best[i+size])
		}
	}
	return best[0]
}

func TestTpDstRendering(t *testing.T) {
	for _, tc := range []struct {
		m    Match
		want string
	}{
		{MatchProtocol(ProtoTCP).TpDst(80, 0xffff), "tcp,tp_dst=80"},
		{MatchProtocol(ProtoUDP6).TpDst(8000, 0xffc0), "udp6,tp_dst=0x1f40/0xffc0"},
		{MatchProtocol(ProtoSCTP).TpDst(1, 0), "sctp"},
		{MatchProtocol(ProtoIPv4).IPSrc(cidr("0.0.0.0/0")), "ip"},
		{MatchProtocol(ProtoIPv6).IPDst(cidr("fd00::/8")), "ipv6,ipv6_dst=fd00::/8"},
		{MatchAll().ConjID(7).CTState(CTNew|CTTracked, 0).WithProtocol(ProtoIPv4), "conj_id=7,ct_state=+new+trk,ip"},
	} {
		if got := tc.m.String(); got != tc.want {
			t.Errorf("match = %q, want %q", got, tc.want)
		}
	}
}
