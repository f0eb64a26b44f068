package ipam

import (
	"errors"
	"net/netip"
	"testing"
)

func prefixStrings(ps []netip.Prefix) []string {
	var s []string
	for _, p := range ps {
		s = append(s, p.String())
	}
	return s
}

func newNodeSubnets(t *testing.T, cidrs ...ClusterCIDR) *NodeSubnets {
	t.Helper()
	n, err := NewNodeSubnets(cidrs)
	if err != nil {
		t.Fatalf("NewNodeSubnets: %v", err)
	}
	return n
}

func TestNodeSubnetsDualStack(t *testing.T) {
	n := newNodeSubnets(t, DefaultClusterCIDR(IPv6), DefaultClusterCIDR(IPv4))
	got, err := n.Allocate("n0")
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"10.244.0.0/24", "fd00:10:244::/64"}
	if !equalStrings(prefixStrings(got), want) {
		t.Errorf("Allocate(n0) = %v, want %v (IPv4 first)", got, want)
	}
	again, _ := n.Allocate("n0")
	if !equalStrings(prefixStrings(again), want) {
		t.Errorf("second Allocate(n0) = %v, want %v", again, want)
	}
	if got := prefixStrings(n.Lookup("n0")); !equalStrings(got, want) {
		t.Errorf("Lookup(n0) = %v, want %v", got, want)
	}
	if got := prefixStrings(n.Release("n0")); !equalStrings(got, want) {
		t.Errorf("Release(n0) = %v, want %v", got, want)
	}
	if got := n.Lookup("n0"); len(got) != 0 {
		t.Errorf("Lookup after Release = %v", got)
	}
}

func TestNodeSubnetsRollback(t *testing.T) {
	v4 := DefaultClusterCIDR(IPv4)
	v6 := ClusterCIDR{CIDR: prefix("fd00:10:244::/63"), BlockBits: 64} // two IPv6 blocks only
	tests := []struct {
		name         string
		restoreIPv4  bool // the node held its IPv4 block before the failing call
		wantIPv4Kept bool
	}{
		{name: "fresh IPv4 block is rolled back", restoreIPv4: false, wantIPv4Kept: false},
		{name: "IPv4 block held before is kept", restoreIPv4: true, wantIPv4Kept: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			n := newNodeSubnets(t, v4, v6)
			for _, node := range []string{"a", "b"} {
				if _, err := n.Allocate(node); err != nil {
					t.Fatal(err)
				}
			}
			if tt.restoreIPv4 {
				if err := n.Restore("c", []netip.Prefix{prefix("10.244.9.0/24")}); err != nil {
					t.Fatal(err)
				}
			}
			_, err := n.Allocate("c")
			var exhausted *SubnetExhaustedError
			if !errors.As(err, &exhausted) || exhausted.ClusterCIDR != v6 {
				t.Fatalf("Allocate(c) = %v, want IPv6 exhaustion", err)
			}
			wantErrContains(t, err, `allocate IPv6 block for node "c"`, "fd00:10:244::/63", "2 nodes")
			a4, _ := n.Allocator(IPv4)
			_, kept := a4.Lookup("c")
			if kept != tt.wantIPv4Kept {
				t.Errorf("IPv4 block of c kept = %v, want %v", kept, tt.wantIPv4Kept)
			}
			wantInUse := uint64(2)
			if tt.wantIPv4Kept {
				wantInUse = 3
			}
			if a4.InUse() != wantInUse {
				t.Errorf("IPv4 InUse = %d, want %d", a4.InUse(), wantInUse)
			}
		})
	}
}

func TestNodeSubnetsRestore(t *testing.T) {
	n := newNodeSubnets(t, DefaultClusterCIDR(IPv4))
	if err := n.Restore("a", []netip.Prefix{prefix("10.244.3.0/24")}); err != nil {
		t.Fatal(err)
	}
	// b's IPv4 block is taken and it claims an IPv6 block with no IPv6 CIDR.
	err := n.Restore("b", []netip.Prefix{prefix("10.244.3.0/24"), prefix("fd00:10:244:1::/64")})
	if !errors.Is(err, ErrConflict) {
		t.Fatalf("Restore(b) = %v, want a conflict", err)
	}
	wantErrContains(t, err, `already allocated to node "a"`, "no IPv6 cluster CIDR is configured")

	// A valid block is kept even when another one of the node is refused.
	n6 := newNodeSubnets(t, DefaultClusterCIDR(IPv4), DefaultClusterCIDR(IPv6))
	err = n6.Restore("c", []netip.Prefix{prefix("10.244.5.0/24"), prefix("fd00:99::/64")})
	wantErrContains(t, err, "outside cluster CIDR fd00:10:244::/48")
	if got := prefixStrings(n6.Lookup("c")); !equalStrings(got, []string{"10.244.5.0/24"}) {
		t.Errorf("Lookup(c) = %v, want the valid IPv4 block", got)
	}
	// Allocate then fills in the missing family and keeps the IPv4 block.
	got, err := n6.Allocate("c")
	if err != nil || !equalStrings(prefixStrings(got), []string{"10.244.5.0/24", "fd00:10:244::/64"}) {
		t.Errorf("Allocate(c) = %v, %v", got, err)
	}
}

func TestNewNodeSubnetsInvalid(t *testing.T) {
	_, err := NewNodeSubnets([]ClusterCIDR{{CIDR: prefix("10.244.0.0/16"), BlockBits: 64}})
	wantErrContains(t, err, "invalid cluster CIDR plan", "IPv6 block size")
	_, err = NewNodeSubnets([]ClusterCIDR{DefaultClusterCIDR(IPv6), DefaultClusterCIDR(IPv6)})
	wantErrContains(t, err, "two IPv6 cluster CIDRs")
}
