package policy

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"slices"
	"testing"
)

// The memo's results are those of the functions it stands for, and holders of the same
// lists given the same change get the same backing array.
func TestSetMemoSharesWhatItComputes(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	randomSet := func(n int) []netip.Prefix {
		var out []netip.Prefix
		for range n {
			out = append(out, netip.PrefixFrom(netip.AddrFrom4([4]byte{10, 0, byte(rng.IntN(4)), byte(rng.IntN(256))}), 32))
		}
		return SortPrefixes(out)
	}
	memo := NewSetMemo()
	for i := range 200 {
		old, nu := randomSet(50), randomSet(50)
		if i%3 == 0 {
			nu = old
		}
		added, removed := DiffPrefixes(old, nu)
		for holder := range 3 {
			// Each holder's patch is a copy, as each node's delta carries its own.
			got := memo.Patch(old, slices.Clone(added), slices.Clone(removed))
			if !slices.Equal(got, nu) {
				t.Fatalf("case %d, holder %d: Patch gives %v, want %v", i, holder, got, nu)
			}
			if again := memo.Patch(old, slices.Clone(added), slices.Clone(removed)); len(got) > 0 && &again[0] != &got[0] {
				t.Fatalf("case %d: two holders of the same list and patch got two copies", i)
			}
			if eq := memo.Equal(old, got); eq != slices.Equal(old, nu) {
				t.Fatalf("case %d: Equal says %v of lists that are %v", i, eq, slices.Equal(old, nu))
			}
			a, r := memo.Diff(old, got)
			if !slices.Equal(a, added) || !slices.Equal(r, removed) {
				t.Fatalf("case %d: Diff gives +%v -%v, want +%v -%v", i, a, r, added, removed)
			}
			gone := Gone{Addresses: map[netip.Prefix]struct{}{}}
			met := memo.meetAddresses(old, got, gone)
			want := IntersectPrefixes(old, nu)
			if !slices.Equal(met, want) {
				t.Fatalf("case %d: meet %v, want %v", i, met, want)
			}
			if slices.Equal(met, old) && len(old) > 0 && &met[0] != &old[0] {
				t.Fatalf("case %d: a meet equal to the old list is not the old list: comparing them costs the list", i)
			}
		}
		if i%50 == 49 {
			memo.Reset()
		}
	}
	// A patch is told apart from another of the same prefixes in the other list.
	p := []netip.Prefix{netip.MustParsePrefix("10.0.0.1/32")}
	set := []netip.Prefix{netip.MustParsePrefix("10.0.0.2/32")}
	if got := memo.Patch(set, p, nil); len(got) != 2 {
		t.Fatalf("adding %v to %v gives %v", p, set, got)
	}
	if got := memo.Patch(set, nil, p); fmt.Sprint(got) != fmt.Sprint(set) {
		t.Fatalf("removing %v from %v gives %v: the memo took it for the addition", p, set, got)
	}
}
