package transition

import (
	"fmt"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/kovs-net/kovs/go-controller/pkg/controller/networkpolicy"
	"github.com/kovs-net/kovs/go-controller/pkg/policy"
)

// A set every node holds, changed by one address, is patched, met and compared once per
// change, not once per node: the nodes' shares keep one list between them, and every
// receiver still gets the patch that takes its share to the new list.
func TestNodesShareTheListOfASetTheyAllHold(t *testing.T) {
	var addrs []netip.Prefix
	for i := range 100 {
		addrs = append(addrs, netip.PrefixFrom(netip.AddrFrom4([4]byte{10, 0, byte(i >> 8), byte(i)}), 32))
	}
	nodes := []string{"node-1", "node-2", "node-3"}
	first := networkpolicy.Cut{Shares: map[string]policy.NodeShare{}}
	added := netip.MustParsePrefix("10.1.0.1/32")
	grow := networkpolicy.Cut{Deltas: map[string]policy.Delta{}}
	removed := addrs[7]
	shrink := networkpolicy.Cut{Deltas: map[string]policy.Delta{}}
	for _, name := range nodes {
		s := policy.NewNodeShare(name)
		s.Generation = 1
		// The compiler's snapshots share a set's list (networkpolicy's addrSet.list).
		s.AddressSets["peers"] = policy.AddressSet{ID: "peers", Addresses: addrs}
		first.Shares[name] = s
		// Each node's delta carries its own copy of the patch, as the compiler's do.
		grow.Deltas[name] = policy.Delta{Node: name, FromGeneration: 1, Generation: 2,
			UpdatedAddressSets: []policy.AddressSetPatch{{ID: "peers", Added: []netip.Prefix{added}}}}
		shrink.Deltas[name] = policy.Delta{Node: name, FromGeneration: 2, Generation: 3,
			UpdatedAddressSets: []policy.AddressSetPatch{{ID: "peers", Removed: []netip.Prefix{removed}}}}
	}
	src := &cuts{first, grow, shrink}
	c := newCore(src, 100, 10*time.Second)
	for _, name := range nodes {
		c.adds[name] = struct{}{}
	}
	t0 := time.Unix(1000, 0)
	c.advance(t0)
	receivers := map[string]*receiver{}
	shares := map[string]policy.NodeShare{}
	for _, name := range nodes {
		n := c.nodes[name]
		receivers[name] = newReceiver(n.sent.Generation)
		n.receivers = append(n.receivers, receivers[name])
		shares[name] = n.sent.Clone()
		c.realized(name, n.sent.Generation)
	}
	c.advance(t0) // releases the floors and takes the first change
	for step, want := range [][]netip.Prefix{
		policy.SortPrefixes(append(slices.Clone(addrs), added)),
		policy.SortPrefixes(slices.DeleteFunc(append(slices.Clone(addrs), added), func(p netip.Prefix) bool { return p == removed })),
	} {
		var lists [][]netip.Prefix
		for _, name := range nodes {
			n := c.nodes[name]
			d, ok := receivers[name].delta(&n.sent, c.memo)
			if !ok {
				t.Fatalf("step %d: %s's receiver has no delta", step, name)
			}
			share := shares[name]
			if err := d.Apply(&share); err != nil {
				t.Fatalf("step %d: %s: %v", step, name, err)
			}
			shares[name] = share
			if got := share.AddressSets["peers"].Addresses; !slices.Equal(got, want) {
				t.Fatalf("step %d: %s's receiver has %d addresses after its delta, want %d", step, name, len(got), len(want))
			}
			c.realized(name, n.sent.Generation)
			lists = append(lists, n.target.AddressSets["peers"].Addresses, n.sent.AddressSets["peers"].Addresses)
		}
		for i, l := range lists {
			if !slices.Equal(l, want) {
				t.Fatalf("step %d: list %d has %d addresses, want %d", step, i, len(l), len(want))
			}
			if &l[0] != &lists[0][0] {
				t.Fatalf("step %d: the nodes' targets and sent shares hold %s copies of the set", step, fmt.Sprint(len(lists)))
			}
		}
		c.advance(t0)
	}
}
