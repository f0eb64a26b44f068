package integration

import (
	"strings"
	"testing"

	"github.com/kovs-net/kovs/go-controller/pkg/ovs"
	"github.com/kovs-net/kovs/go-controller/pkg/ovs/ovstest"
)

// A port's transmit rate is one QoS row, created, changed and removed in place, and gone
// with the port: QoS is a root table, so nothing else would delete it.
func TestPortTransmitRateLeavesNoRows(t *testing.T) {
	rig := ovstest.Start(t)
	ctx := testContext(t)
	db := connect(t, ctx, rig)
	if err := db.EnsureBridge(ctx, brIntSpec()); err != nil {
		t.Fatal(err)
	}
	spec := ovs.PortSpec{Name: "pod1", Type: ovs.PortTypeInternal}
	if _, err := db.EnsurePort(ctx, "br-int", spec); err != nil {
		t.Fatal(err)
	}
	qosRows := func() []string {
		return strings.Fields(rig.Vsctl(t, "--bare", "--columns=_uuid", "list", "QoS"))
	}
	for _, rate := range []uint64{10_000_000, 10_000_000, 20_000_000} {
		if err := db.SetPortTransmitRate(ctx, "pod1", rate); err != nil {
			t.Fatalf("SetPortTransmitRate %d: %v", rate, err)
		}
		if got, err := db.PortTransmitRate(ctx, "pod1"); err != nil || got != rate {
			t.Fatalf("PortTransmitRate = %d, %v; want %d", got, err, rate)
		}
		if rows := qosRows(); len(rows) != 1 {
			t.Fatalf("after rate %d: QoS rows %v, want one", rate, rows)
		}
	}
	if got := rig.Vsctl(t, "get", "QoS", qosRows()[0], "type", "other_config:max-rate"); got != "linux-htb\n\"20000000\"" {
		t.Errorf("QoS row: %q", got)
	}
	if err := db.SetPortTransmitRate(ctx, "pod1", 0); err != nil {
		t.Fatal(err)
	}
	if rows := qosRows(); len(rows) != 0 {
		t.Errorf("after removing the limit: QoS rows %v", rows)
	}
	if err := db.SetPortTransmitRate(ctx, "pod1", 5_000_000); err != nil {
		t.Fatal(err)
	}
	if err := db.DeletePort(ctx, "br-int", "pod1"); err != nil {
		t.Fatal(err)
	}
	if rows := qosRows(); len(rows) != 0 {
		t.Errorf("after DeletePort: QoS rows %v", rows)
	}
	// A port deleted behind kovs's back leaves its row; PruneQoS finds it.
	if _, err := db.EnsurePort(ctx, "br-int", spec); err != nil {
		t.Fatal(err)
	}
	if err := db.SetPortTransmitRate(ctx, "pod1", 5_000_000); err != nil {
		t.Fatal(err)
	}
	rig.Vsctl(t, "del-port", "br-int", "pod1")
	rig.Vsctl(t, "create", "QoS", "type=linux-htb") // not kovs's: kept
	if n, err := db.PruneQoS(ctx); err != nil || n != 1 {
		t.Errorf("PruneQoS = %d, %v; want 1", n, err)
	}
	if rows := qosRows(); len(rows) != 1 {
		t.Errorf("after PruneQoS: QoS rows %v, want only the foreign one", rows)
	}
}

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
