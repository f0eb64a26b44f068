package policy

import (
	"math/rand/v2"
	"net/netip"
	"slices"
	"testing"
)

func prefixes(t *testing.T, ss ...string) []netip.Prefix {
	t.Helper()
	out := make([]netip.Prefix, 0, len(ss))
	for _, s := range ss {
		out = append(out, netip.MustParsePrefix(s))
	}
	return out
}

func TestSubtractPrefixes(t *testing.T) {
	cases := []struct {
		name   string
		cidr   string
		except []string
		want   []string
	}{
		{"no exception", "10.0.0.0/8", nil, []string{"10.0.0.0/8"}},
		{"host bits are masked", "10.1.2.3/8", nil, []string{"10.0.0.0/8"}},
		{"one half", "10.0.0.0/8", []string{"10.128.0.0/9"}, []string{"10.0.0.0/9"}},
		{"a /24 out of a /22", "192.168.0.0/22", []string{"192.168.1.0/24"},
			[]string{"192.168.0.0/24", "192.168.2.0/23"}},
		{"a host out of a /29", "10.0.0.0/29", []string{"10.0.0.5/32"},
			[]string{"10.0.0.0/30", "10.0.0.4/32", "10.0.0.6/31"}},
		{"two exceptions", "10.0.0.0/24", []string{"10.0.0.0/26", "10.0.0.192/26"}, []string{"10.0.0.64/26", "10.0.0.128/26"}},
		{"exception covering all", "10.0.0.0/24", []string{"10.0.0.0/16"}, nil},
		{"exception outside", "10.0.0.0/24", []string{"10.0.1.0/24"}, []string{"10.0.0.0/24"}},
		{"other family ignored", "10.0.0.0/24", []string{"::/0"}, []string{"10.0.0.0/24"}},
		{"IPv6", "fd00::/62", []string{"fd00:0:0:1::/64"}, []string{"fd00::/64", "fd00:0:0:2::/63"}},
		{"everything but a host, IPv4", "0.0.0.0/0", []string{"0.0.0.0/1", "128.0.0.0/2", "192.0.0.0/3", "224.0.0.0/4",
			"240.0.0.0/5", "248.0.0.0/6", "252.0.0.0/7", "254.0.0.0/8", "255.0.0.0/9", "255.128.0.0/9"}, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := SubtractPrefixes(netip.MustParsePrefix(c.cidr), prefixes(t, c.except...))
			if want := prefixes(t, c.want...); !slices.Equal(got, want) {
				t.Errorf("SubtractPrefixes(%s, %v) = %v, want %v", c.cidr, c.except, got, want)
			}
		})
	}
}

// TestSubtractPrefixesExact checks, on random small cases, that the result covers
// exactly the addresses of the CIDR outside the exceptions, with disjoint prefixes that
// could not be merged (minimality).
func TestSubtractPrefixesExact(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	base := netip.MustParsePrefix("10.0.0.0/24")
	for i := 0; i < 500; i++ {
		var except []netip.Prefix
		for j := rng.IntN(4); j > 0; j-- {
			bits := 24 + rng.IntN(9)
			addr := netip.AddrFrom4([4]byte{10, 0, 0, byte(rng.IntN(256))})
			except = append(except, netip.PrefixFrom(addr, bits).Masked())
		}
		got := SubtractPrefixes(base, except)
		for a := 0; a < 256; a++ {
			ip := netip.AddrFrom4([4]byte{10, 0, 0, byte(a)})
			excepted := slices.ContainsFunc(except, func(e netip.Prefix) bool { return e.Contains(ip) })
			covered := 0
			for _, p := range got {
				if p.Contains(ip) {
					covered++
				}
			}
			if covered > 1 || (covered == 1) == excepted {
				t.Fatalf("except %v: %s covered %d times by %v", except, ip, covered, got)
			}
		}
		for k := 1; k < len(got); k++ {
			a, b := got[k-1], got[k]
			if a.Bits() == b.Bits() {
				parent := netip.PrefixFrom(a.Addr(), a.Bits()-1).Masked()
				if parent.Contains(b.Addr()) && parent.Addr() == a.Addr() {
					t.Fatalf("except %v: %s and %s should be one prefix", except, a, b)
				}
			}
		}
	}
}

func TestDiffAndPatchPrefixes(t *testing.T) {
	old := prefixes(t, "10.0.0.1/32", "10.0.0.2/32", "10.0.0.3/32", "fd00::1/128")
	nu := prefixes(t, "10.0.0.2/32", "10.0.0.4/32", "fd00::1/128", "fd00::2/128")
	added, removed := DiffPrefixes(old, nu)
	if want := prefixes(t, "10.0.0.4/32", "fd00::2/128"); !slices.Equal(added, want) {
		t.Errorf("added = %v, want %v", added, want)
	}
	if want := prefixes(t, "10.0.0.1/32", "10.0.0.3/32"); !slices.Equal(removed, want) {
		t.Errorf("removed = %v, want %v", removed, want)
	}
	if got := PatchPrefixes(old, added, removed); !slices.Equal(got, nu) {
		t.Errorf("PatchPrefixes = %v, want %v", got, nu)
	}
	if old[0] != netip.MustParsePrefix("10.0.0.1/32") {
		t.Error("PatchPrefixes modified its input")
	}
}
