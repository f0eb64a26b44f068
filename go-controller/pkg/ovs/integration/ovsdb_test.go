package integration

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/kovs-net/kovs/go-controller/pkg/ovs"
	"github.com/kovs-net/kovs/go-controller/pkg/ovs/ovstest"
)

func testContext(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func connect(t *testing.T, ctx context.Context, rig *ovstest.Rig) *ovs.OVSDB {
	t.Helper()
	log := logrus.New()
	log.SetLevel(logrus.InfoLevel)
	db, err := ovs.NewOVSDB(ctx, rig.Endpoint(), ovs.WithLogger(logrus.NewEntry(log).WithField("test", t.Name())))
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	t.Cleanup(db.Close)
	return db
}

func brIntSpec() ovs.BridgeSpec {
	return ovs.BridgeSpec{
		Name:         "br-int",
		DatapathType: ovs.DatapathNetdev,
		FailMode:     ovs.FailModeSecure,
		Protocols:    []string{"OpenFlow13", "OpenFlow15"},
		OtherConfig:  map[string]string{"datapath-id": "0000000000000a01", "disable-in-band": "true"},
		ExternalIDs:  map[string]string{"kovs.io/owner": "agent"},
	}
}

func TestEnsureBridgeIsIdempotent(t *testing.T) {
	rig := ovstest.Start(t)
	ctx := testContext(t)
	db := connect(t, ctx, rig)
	for i := range 2 {
		if err := db.EnsureBridge(ctx, brIntSpec()); err != nil {
			t.Fatalf("EnsureBridge #%d: %v", i+1, err)
		}
	}
	if got := rig.Vsctl(t, "get", "Bridge", "br-int", "fail_mode"); got != "secure" {
		t.Errorf("fail_mode = %q, want secure", got)
	}
	if got := rig.Vsctl(t, "get", "Bridge", "br-int", "datapath_type"); got != "netdev" {
		t.Errorf("datapath_type = %q, want netdev", got)
	}
	if got := rig.Vsctl(t, "list-br"); got != "br-int" {
		t.Errorf("bridges = %q, want just br-int", got)
	}
	if got := rig.Vsctl(t, "list-ports", "br-int"); got != "" {
		t.Errorf("ports besides the local one = %q, want none", got)
	}
	ports, err := db.Ports(ctx, "br-int")
	if err != nil {
		t.Fatal(err)
	}
	if len(ports) != 1 || ports[0].Name != "br-int" || ports[0].Ofport != ovs.OfportLocal || ports[0].Type != "internal" {
		t.Errorf("ports = %+v, want the bridge's internal port at ofport %d", ports, ovs.OfportLocal)
	}
	if !strings.Contains(rig.Vsctl(t, "get", "Bridge", "br-int", "other_config"), `datapath-id="0000000000000a01"`) {
		t.Errorf("other_config lacks datapath-id")
	}
}

// TestEnsureBridgeReportsDatapathFailure asks for the kernel datapath where the
// openvswitch module is absent: ovs-vswitchd cannot create the bridge, and
// EnsureBridge must say so rather than succeed.
func TestEnsureBridgeReportsDatapathFailure(t *testing.T) {
	if _, err := os.Stat("/sys/module/openvswitch"); err == nil {
		t.Skip("skipping: the openvswitch kernel module is loaded, the system datapath works here")
	}
	rig := ovstest.Start(t)
	ctx := testContext(t)
	db := connect(t, ctx, rig)
	types, err := db.DatapathTypes(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("datapath types without the kernel module: %v", types)
	spec := brIntSpec()
	spec.DatapathType = ovs.DatapathSystem
	err = db.EnsureBridge(ctx, spec)
	if err == nil || !strings.Contains(err.Error(), "did not create") {
		t.Fatalf("EnsureBridge with the system datapath = %v, want an error", err)
	}
	t.Logf("error: %v", err)
	// Switching the same bridge to netdev repairs it.
	if err := db.EnsureBridge(ctx, brIntSpec()); err != nil {
		t.Fatalf("EnsureBridge back to netdev: %v", err)
	}
}
