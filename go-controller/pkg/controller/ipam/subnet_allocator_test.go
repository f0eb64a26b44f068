package ipam

import (
	"errors"
	"net/netip"
	"testing"
)

func newSubnetAllocator(t *testing.T, cidr string, blockBits int) *SubnetAllocator {
	t.Helper()
	a, err := NewSubnetAllocator(ClusterCIDR{CIDR: prefix(cidr), BlockBits: blockBits})
	if err != nil {
		t.Fatalf("NewSubnetAllocator(%s, /%d): %v", cidr, blockBits, err)
	}
	return a
}

func allocateBlocks(t *testing.T, a *SubnetAllocator, nodes ...string) []string {
	t.Helper()
	var got []string
	for _, n := range nodes {
		b, err := a.Allocate(n)
		if err != nil {
			t.Fatalf("Allocate(%q): %v", n, err)
		}
		got = append(got, b.String())
	}
	return got
}

func equalStrings(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestSubnetAllocatorAllocate(t *testing.T) {
	tests := []struct {
		name      string
		cidr      string
		blockBits int
		want      []string
	}{
		{"IPv4 default", "10.244.0.0/16", 24, []string{"10.244.0.0/24", "10.244.1.0/24", "10.244.2.0/24"}},
		{"IPv4 /26 blocks", "10.244.0.0/16", 26, []string{"10.244.0.0/26", "10.244.0.64/26", "10.244.0.128/26"}},
		{"IPv6 default", "fd00:10:244::/48", 64, []string{"fd00:10:244::/64", "fd00:10:244:1::/64", "fd00:10:244:2::/64"}},
		{"IPv6 blocks straddling 64 bits", "fd00::/56", 80, []string{"fd00::/80", "fd00::1:0:0:0/80", "fd00::2:0:0:0/80"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := newSubnetAllocator(t, tt.cidr, tt.blockBits)
			if got := allocateBlocks(t, a, "n0", "n1", "n2"); !equalStrings(got, tt.want) {
				t.Errorf("blocks = %v, want %v", got, tt.want)
			}
			if got := allocateBlocks(t, a, "n1"); got[0] != tt.want[1] {
				t.Errorf("second Allocate(n1) = %s, want the same %s", got[0], tt.want[1])
			}
			if a.InUse() != 3 {
				t.Errorf("InUse = %d, want 3", a.InUse())
			}
		})
	}
}

func TestSubnetAllocatorIndexRoundTrip(t *testing.T) {
	a := newSubnetAllocator(t, "fd00::/17", 80) // 2^63 blocks, indices span both halves
	for _, i := range []uint64{0, 1, 1 << 15, 1<<16 + 5, 1<<62 + 3, 1<<63 - 1} {
		b := a.blockAt(i)
		if !a.cidr.CIDR.Contains(b.Addr()) || b != b.Masked() || a.indexOf(b) != i {
			t.Errorf("blockAt(%d) = %s, indexOf = %d", i, b, a.indexOf(b))
		}
	}
}

func TestSubnetAllocatorExhaustion(t *testing.T) {
	a := newSubnetAllocator(t, "10.244.0.0/22", 24)
	if a.Capacity() != 4 {
		t.Fatalf("Capacity = %d, want 4", a.Capacity())
	}
	allocateBlocks(t, a, "n0", "n1", "n2", "n3")
	_, err := a.Allocate("n4")
	if !errors.Is(err, ErrExhausted) {
		t.Fatalf("Allocate past capacity: %v, want ErrExhausted", err)
	}
	var exhausted *SubnetExhaustedError
	if !errors.As(err, &exhausted) || exhausted.ClusterCIDR.CIDR != prefix("10.244.0.0/22") {
		t.Errorf("error %v is not a *SubnetExhaustedError for 10.244.0.0/22", err)
	}
	wantErrContains(t, err, "cluster CIDR 10.244.0.0/22", "/24 node block", "caps the cluster at 4 nodes")

	// An existing node still gets its block; a released block is reused.
	allocateBlocks(t, a, "n2")
	a.Release("n1")
	if got := allocateBlocks(t, a, "n4"); got[0] != "10.244.1.0/24" {
		t.Errorf("after releasing n1, Allocate(n4) = %s, want 10.244.1.0/24", got[0])
	}
}

func TestSubnetAllocatorBackOfTheLine(t *testing.T) {
	a := newSubnetAllocator(t, "10.244.0.0/22", 24)
	allocateBlocks(t, a, "n0", "n1")
	a.Release("n0")
	// The never-used blocks come first, then n0's.
	got := allocateBlocks(t, a, "n2", "n3", "n4")
	want := []string{"10.244.2.0/24", "10.244.3.0/24", "10.244.0.0/24"}
	if !equalStrings(got, want) {
		t.Errorf("blocks = %v, want %v", got, want)
	}
	if b, ok := a.Release("nobody"); ok {
		t.Errorf("Release(nobody) = %s, true", b)
	}
}

func TestSubnetAllocatorRestoreConflicts(t *testing.T) {
	tests := []struct {
		name       string
		node       string
		block      string
		wantReason ConflictReason
		wantHolder string
		wantMsg    []string
	}{
		{"same node again", "n1", "10.244.1.0/24", 0, "", nil},
		{"taken by another node", "n2", "10.244.1.0/24", ConflictTaken, "n1",
			[]string{`node block 10.244.1.0/24 claimed by "n2"`, `already allocated to node "n1"`}},
		{"node already has a block", "n1", "10.244.7.0/24", ConflictAlreadyAssigned, "10.244.1.0/24",
			[]string{"already holds IPv4 block 10.244.1.0/24"}},
		{"outside the cluster CIDR", "n3", "10.245.1.0/24", ConflictOutside, "",
			[]string{"outside cluster CIDR 10.244.0.0/16"}},
		{"contains the cluster CIDR", "n3", "10.0.0.0/8", ConflictOutside, "", []string{"outside cluster CIDR"}},
		{"other family", "n3", "fd00:10:244:1::/64", ConflictOutside, "", []string{"outside cluster CIDR"}},
		{"wrong size", "n3", "10.244.4.0/23", ConflictWrongSize, "",
			[]string{"wrong size: cluster CIDR 10.244.0.0/16 is carved into /24 blocks"}},
		{"host bits set", "n3", "10.244.4.7/24", ConflictMisaligned, "", []string{"not a block boundary", "10.244.4.0/24"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := newSubnetAllocator(t, "10.244.0.0/16", 24)
			if err := a.Restore("n1", prefix("10.244.1.0/24")); err != nil {
				t.Fatalf("Restore(n1): %v", err)
			}
			err := a.Restore(tt.node, netip.MustParsePrefix(tt.block))
			if tt.wantReason == 0 {
				if err != nil {
					t.Fatalf("Restore: %v", err)
				}
				return
			}
			var conflict *ConflictError
			if !errors.As(err, &conflict) || !errors.Is(err, ErrConflict) {
				t.Fatalf("Restore: %v, want a *ConflictError", err)
			}
			if conflict.Reason != tt.wantReason || conflict.Holder != tt.wantHolder {
				t.Errorf("reason, holder = %v, %q; want %v, %q", conflict.Reason, conflict.Holder, tt.wantReason, tt.wantHolder)
			}
			wantErrContains(t, err, tt.wantMsg...)
			if _, ok := a.Lookup(tt.node); ok && tt.node != "n1" {
				t.Errorf("refused block was recorded for %s", tt.node)
			}
		})
	}
}

func TestSubnetAllocatorRestoreThenAllocate(t *testing.T) {
	a := newSubnetAllocator(t, "10.244.0.0/21", 24) // 8 blocks
	for node, block := range map[string]string{"a": "10.244.4.0/24", "b": "10.244.1.0/24"} {
		if err := a.Restore(node, prefix(block)); err != nil {
			t.Fatal(err)
		}
	}
	// Above the highest restored block first, then the unknown ones below it.
	got := allocateBlocks(t, a, "c", "d", "e", "f", "g", "h")
	want := []string{"10.244.5.0/24", "10.244.6.0/24", "10.244.7.0/24", "10.244.0.0/24", "10.244.2.0/24", "10.244.3.0/24"}
	if !equalStrings(got, want) {
		t.Errorf("blocks after restore = %v, want %v", got, want)
	}
}

func TestSubnetAllocatorHighWater(t *testing.T) {
	a := newSubnetAllocator(t, "10.244.0.0/21", 24)
	if _, ok := a.HighWater(); ok {
		t.Error("fresh allocator has a high water")
	}
	allocateBlocks(t, a, "a", "b", "c")
	hw, _ := a.HighWater()

	b := newSubnetAllocator(t, "10.244.0.0/21", 24)
	if err := b.Restore("a", prefix("10.244.0.0/24")); err != nil {
		t.Fatal(err)
	}
	if err := b.RestoreHighWater(hw); err != nil {
		t.Fatal(err)
	}
	if got := allocateBlocks(t, b, "d"); got[0] != "10.244.3.0/24" {
		t.Errorf("after RestoreHighWater(%s), Allocate = %s, want 10.244.3.0/24", hw, got[0])
	}
	wantErrContains(t, b.RestoreHighWater(prefix("10.244.0.0/23")), "not a /24 block of cluster CIDR 10.244.0.0/21")
}
