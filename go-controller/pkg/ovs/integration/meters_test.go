package integration

import (
	"testing"

	"github.com/kovs-net/kovs/go-controller/pkg/ovs"
)

// Meters are added, modified in place and deleted; a missing one deletes fine.
func TestMeters(t *testing.T) {
	_, of, ctx := bridgeWithFlows(t)
	m := ovs.Meter{ID: 7, RateKbps: 50_000, BurstKbits: 25_000}
	for _, want := range []ovs.Meter{m, m, {ID: 7, RateKbps: 10_000, BurstKbits: 5_000}} {
		if err := of.SetMeter(ctx, want); err != nil {
			t.Fatalf("SetMeter %s: %v", want, err)
		}
		got, err := of.DumpMeters(ctx)
		if err != nil || len(got) != 1 || got[0] != want {
			t.Fatalf("DumpMeters = %+v, %v; want [%s]", got, err, want)
		}
	}
	for range 2 {
		if err := of.DeleteMeter(ctx, 7); err != nil {
			t.Fatal(err)
		}
	}
	if got, err := of.DumpMeters(ctx); err != nil || len(got) != 0 {
		t.Errorf("after delete: %+v, %v", got, err)
	}
}
