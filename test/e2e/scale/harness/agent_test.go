package harness

import (
	"net/netip"
	"testing"
	"time"

	"github.com/kovs-net/kovs/go-controller/pkg/policy"
)

type noObserver struct{}

func (noObserver) observe(string, policyKey, bool, time.Time, uint64) {}

// TestAgentLogsAddressesEnteringAndLeavingItsSets: while its log runs, the simulated agent
// notes when an address first enters some address set of its share and when it first
// leaves all of them: by a set's patch, a set added or removed whole, or a snapshot; an
// address still held by another set has not left.
func TestAgentLogsAddressesEnteringAndLeavingItsSets(t *testing.T) {
	a := newAgent("n1", noObserver{})
	ip := func(s string) netip.Addr { return netip.MustParseAddr(s) }
	pfx := func(s string) netip.Prefix { return netip.PrefixFrom(ip(s), 32) }
	share := policy.NewNodeShare("n1")
	share.Generation = 1
	share.AddressSets["s1"] = policy.AddressSet{ID: "s1", Addresses: []netip.Prefix{pfx("10.0.0.1")}}
	if err := a.Snapshot(share); err != nil {
		t.Fatal(err)
	}
	a.startAddressLog()
	gen := uint64(1)
	delta := func(d policy.Delta) {
		t.Helper()
		d.Node, d.FromGeneration, d.Generation = "n1", gen, gen+1
		gen++
		if err := a.Delta(d); err != nil {
			t.Fatal(err)
		}
	}
	delta(policy.Delta{UpdatedAddressSets: []policy.AddressSetPatch{{ID: "s1", Added: []netip.Prefix{pfx("10.0.0.2")}}}})
	added2 := a.addressTimes(ip("10.0.0.2")).Added
	if added2.IsZero() || !a.addressTimes(ip("10.0.0.3")).Added.IsZero() {
		t.Errorf("after a patch adding 10.0.0.2: %+v and %+v, want only .2 added", a.addressTimes(ip("10.0.0.2")), a.addressTimes(ip("10.0.0.3")))
	}
	delta(policy.Delta{AddedAddressSets: []policy.AddressSet{{ID: "s2", Addresses: []netip.Prefix{pfx("10.0.0.2"), pfx("10.0.0.3")}}}})
	if got := a.addressTimes(ip("10.0.0.1")); !got.Added.IsZero() || !got.Removed.IsZero() {
		t.Errorf("10.0.0.1, held before the log began: %+v, want nothing", got)
	}
	if a.addressTimes(ip("10.0.0.3")).Added.IsZero() || a.addressTimes(ip("10.0.0.2")).Added != added2 {
		t.Errorf("after a new set with .2 and .3: %+v and %+v, want .3 added and .2's first addition kept", a.addressTimes(ip("10.0.0.2")), a.addressTimes(ip("10.0.0.3")))
	}
	delta(policy.Delta{UpdatedAddressSets: []policy.AddressSetPatch{{ID: "s1", Removed: []netip.Prefix{pfx("10.0.0.2")}}}})
	if got := a.addressTimes(ip("10.0.0.2")); !got.Removed.IsZero() || got.Added != added2 {
		t.Errorf("10.0.0.2 out of s1 but still in s2: %+v, want only its first addition", got)
	}
	delta(policy.Delta{RemovedAddressSets: []string{"s2"}})
	if got := a.addressTimes(ip("10.0.0.2")); got.Removed.IsZero() {
		t.Errorf("10.0.0.2 after s2 was removed: %+v, want it removed", got)
	}
	if got := a.addressTimes(ip("10.0.0.3")); got.Removed.IsZero() {
		t.Errorf("10.0.0.3 after s2 was removed: %+v, want it removed", got)
	}
	next := policy.NewNodeShare("n1")
	next.Generation = gen + 1
	next.AddressSets["s3"] = policy.AddressSet{ID: "s3", Addresses: []netip.Prefix{pfx("10.0.0.4")}}
	if err := a.Snapshot(next); err != nil {
		t.Fatal(err)
	}
	if got := a.addressTimes(ip("10.0.0.4")); got.Added.IsZero() {
		t.Errorf("10.0.0.4 brought by a snapshot: %+v, want it added", got)
	}
	if got := a.addressTimes(ip("10.0.0.1")); got.Removed.IsZero() {
		t.Errorf("10.0.0.1 missing from the snapshot: %+v, want it removed", got)
	}
	a.stopAddressLog()
	if got := a.addressTimes(ip("10.0.0.4")); !got.Added.IsZero() {
		t.Errorf("after the log stopped: %+v, want nothing", got)
	}
}
