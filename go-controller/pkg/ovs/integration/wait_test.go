package integration

import (
	"context"
	"testing"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/kovs-net/kovs/go-controller/pkg/ovs"
	"github.com/kovs-net/kovs/go-controller/pkg/ovs/ovstest"
)

// TestWaitsWakeOnCacheUpdates: a client whose poll interval is an hour still sees
// ovs-vswitchd apply a port (cur_cfg, then the ofport) as soon as the monitor brings
// the change, before and after a reconnection (libovsdb builds a new cache then), so a
// CNI ADD never waits for a poll tick. Each call has 30 s, far less than a tick.
func TestWaitsWakeOnCacheUpdates(t *testing.T) {
	rig := ovstest.Start(t)
	ctx := testContext(t)
	log := logrus.New()
	db, err := ovs.NewOVSDB(ctx, rig.Endpoint(), ovs.WithPollInterval(time.Hour),
		ovs.WithLogger(logrus.NewEntry(log).WithField("test", t.Name())))
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	t.Cleanup(db.Close)
	bridgeCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := db.EnsureBridge(bridgeCtx, brIntSpec()); err != nil {
		t.Fatalf("EnsureBridge: %v", err)
	}
	ensure := func(spec ovs.PortSpec) {
		t.Helper()
		ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		ofport, err := db.EnsurePort(ctx, "br-int", spec)
		if err != nil {
			t.Fatalf("EnsurePort %s: %v", spec.Name, err)
		}
		if ofport != spec.OfportRequest {
			t.Errorf("EnsurePort %s = ofport %d, want %d", spec.Name, ofport, spec.OfportRequest)
		}
	}
	ensure(gatewaySpec())

	rig.StopOVSDB(t)
	rig.StartOVSDB(t)
	deadline := time.Now().Add(30 * time.Second)
	for !db.Connected() || db.EnsureBridge(ctx, brIntSpec()) != nil {
		if time.Now().After(deadline) {
			t.Fatal("not reconnected within 30s of the restart")
		}
		time.Sleep(50 * time.Millisecond)
	}
	ensure(tunnelSpec())
}
