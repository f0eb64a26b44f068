package ipam

import (
	"errors"
	"net/netip"
	"testing"
)

func newPodAddressPools(t *testing.T, blocks ...string) *PodAddressPools {
	t.Helper()
	var ps []netip.Prefix
	for _, b := range blocks {
		ps = append(ps, prefix(b))
	}
	p, err := NewPodAddressPools(ps, PoolOptions{})
	if err != nil {
		t.Fatalf("NewPodAddressPools(%v): %v", blocks, err)
	}
	return p
}

func podAddressStrings(as []PodAddress) []string {
	var s []string
	for _, a := range as {
		s = append(s, a.Address.String()+" via "+a.Gateway.String())
	}
	return s
}

func TestPodAddressPoolsDualStack(t *testing.T) {
	p := newPodAddressPools(t, "fd00:10:244:1::/64", "10.244.1.0/24")
	got, err := p.Allocate("ns/a")
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"10.244.1.2/24 via 10.244.1.1", "fd00:10:244:1::2/64 via fd00:10:244:1::1"}
	if !equalStrings(podAddressStrings(got), want) {
		t.Errorf("Allocate = %v, want %v", podAddressStrings(got), want)
	}
	again, _ := p.Allocate("ns/a")
	if !equalStrings(podAddressStrings(again), want) {
		t.Errorf("second Allocate = %v", podAddressStrings(again))
	}
	if got := podAddressStrings(p.Lookup("ns/a")); !equalStrings(got, want) {
		t.Errorf("Lookup = %v", got)
	}
	if ips := p.Release("ns/a"); len(ips) != 2 || ips[0] != addr("10.244.1.2") || ips[1] != addr("fd00:10:244:1::2") {
		t.Errorf("Release = %v", ips)
	}
}

func TestPodAddressPoolsRollback(t *testing.T) {
	p := newPodAddressPools(t, "10.244.1.0/24", "fd00::/126") // two IPv6 addresses
	for _, pod := range []string{"ns/a", "ns/b"} {
		if _, err := p.Allocate(pod); err != nil {
			t.Fatal(err)
		}
	}
	_, err := p.Allocate("ns/c")
	var exhausted *AddressExhaustedError
	if !errors.As(err, &exhausted) || exhausted.Block != prefix("fd00::/126") {
		t.Fatalf("Allocate(ns/c) = %v, want IPv6 exhaustion", err)
	}
	wantErrContains(t, err, `allocate IPv6 address for pod "ns/c"`, "node block fd00::/126")
	v4, _ := p.Pool(IPv4)
	if _, ok := v4.Lookup("ns/c"); ok || v4.InUse() != 2 {
		t.Errorf("IPv4 address of ns/c was not rolled back (InUse %d)", v4.InUse())
	}
	// The rolled-back address went to the back of the line.
	p.Release("ns/a")
	got, err := p.Allocate("ns/d")
	if err != nil || got[0].Address.Addr() != addr("10.244.1.5") || got[1].Address.Addr() != addr("fd00::2") {
		t.Errorf("Allocate(ns/d) = %v, %v", podAddressStrings(got), err)
	}
}

func TestPodAddressPoolsRestore(t *testing.T) {
	p := newPodAddressPools(t, "10.244.1.0/24")
	if err := p.Restore("ns/a", []netip.Addr{addr("10.244.1.7")}); err != nil {
		t.Fatal(err)
	}
	err := p.Restore("ns/b", []netip.Addr{addr("10.244.1.7"), addr("fd00::7")})
	if !errors.Is(err, ErrConflict) {
		t.Fatalf("Restore(ns/b) = %v, want a conflict", err)
	}
	wantErrContains(t, err, `already allocated to pod "ns/a"`, "the node has no IPv6 block")
}

func TestNewPodAddressPoolsInvalid(t *testing.T) {
	_, err := NewPodAddressPools(nil, PoolOptions{})
	wantErrContains(t, err, "no block")
	_, err = NewPodAddressPools([]netip.Prefix{prefix("10.244.1.0/24"), prefix("10.244.2.0/24")}, PoolOptions{})
	wantErrContains(t, err, "two IPv4 node blocks")
	_, err = NewPodAddressPools([]netip.Prefix{prefix("10.244.1.0/31")}, PoolOptions{})
	wantErrContains(t, err, "leaves no pod address")
}
