package integration

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/kovs-net/kovs/go-controller/pkg/ovs"
	"github.com/kovs-net/kovs/go-controller/pkg/ovs/ovstest"
)

// TestReconnectAfterOVSDBRestart restarts ovsdb-server under a connected
// client: a call made while the server is down waits for the reconnection and
// then succeeds, and the cache is rebuilt.
func TestReconnectAfterOVSDBRestart(t *testing.T) {
	rig := ovstest.Start(t)
	ctx := testContext(t)
	db := connect(t, ctx, rig)
	if err := db.EnsureBridge(ctx, brIntSpec()); err != nil {
		t.Fatal(err)
	}
	if _, err := db.EnsurePort(ctx, "br-int", gatewaySpec()); err != nil {
		t.Fatal(err)
	}

	rig.StopOVSDB(t)
	done := make(chan error, 1)
	go func() {
		_, err := db.EnsurePort(ctx, "br-int", tunnelSpec())
		done <- err
	}()
	time.Sleep(300 * time.Millisecond)
	rig.StartOVSDB(t)

	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("EnsurePort across the restart: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("EnsurePort did not finish within 30s of the restart")
	}
	ports, err := db.Ports(ctx, "br-int")
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]int{"br-int": ovs.OfportLocal, "kovs-gw0": 2, "kovs-tun0": 1}
	if len(ports) != len(want) {
		t.Fatalf("ports after restart = %+v, want %v", ports, want)
	}
	for _, p := range ports {
		if want[p.Name] != p.Ofport {
			t.Errorf("port %s at ofport %d, want %d", p.Name, p.Ofport, want[p.Name])
		}
	}
}

// TestConnectWaitsForServer starts the client before ovsdb-server is up.
func TestConnectWaitsForServer(t *testing.T) {
	rig := ovstest.Start(t)
	rig.StopOVSDB(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	type result struct {
		db  *ovs.OVSDB
		err error
	}
	connected := make(chan result, 1)
	go func() {
		db, err := ovs.NewOVSDB(ctx, rig.Endpoint())
		connected <- result{db, err}
	}()
	time.Sleep(500 * time.Millisecond)
	rig.StartOVSDB(t)
	r := <-connected
	if r.err != nil {
		t.Fatalf("NewOVSDB while the server starts: %v", r.err)
	}
	defer r.db.Close()
	if _, err := r.db.DatapathTypes(ctx); err != nil {
		t.Fatal(err)
	}
}

func TestFlowRestoreWait(t *testing.T) {
	rig := ovstest.Start(t)
	ctx := testContext(t)
	db := connect(t, ctx, rig)
	if err := db.SetOtherConfig(ctx, map[string]string{"flow-restore-wait": "true"}); err != nil {
		t.Fatal(err)
	}
	if got := rig.Vsctl(t, "get", "Open_vSwitch", ".", "other_config:flow-restore-wait"); got != `"true"` {
		t.Errorf("flow-restore-wait = %s", got)
	}
	// ovs-vswitchd still applies configuration while flow-restore-wait is set.
	if err := db.EnsureBridge(ctx, brIntSpec()); err != nil {
		t.Fatal(err)
	}
	if _, err := db.EnsurePort(ctx, "br-int", gatewaySpec()); err != nil {
		t.Fatal(err)
	}
	if err := db.RemoveOtherConfig(ctx, "flow-restore-wait"); err != nil {
		t.Fatal(err)
	}
	cfg, err := db.OtherConfig(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := cfg["flow-restore-wait"]; ok {
		t.Errorf("flow-restore-wait still set in the cache: %v", cfg)
	}
	types, err := db.DatapathTypes(ctx)
	if err != nil || len(types) == 0 {
		t.Errorf("DatapathTypes = %v, %v", types, err)
	}
}

// TestInitAndNoVswitchd uses a database no one initialized and no ovs-vswitchd
// serves: Init creates the Open_vSwitch row (once), and EnsureBridge, which
// waits for ovs-vswitchd, says it is not there.
func TestInitAndNoVswitchd(t *testing.T) {
	rig := ovstest.StartDatabase(t)
	ctx := testContext(t)
	db := connect(t, ctx, rig)
	if _, err := db.DatapathTypes(ctx); err == nil || !strings.Contains(err.Error(), "not initialized") {
		t.Errorf("DatapathTypes on an uninitialized database = %v", err)
	}
	for range 2 {
		if err := db.Init(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if got := rig.Vsctl(t, "--columns=_uuid", "--bare", "list", "Open_vSwitch"); len(strings.Fields(got)) != 1 {
		t.Errorf("Open_vSwitch rows: %q, want one", got)
	}
	short, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
	defer cancel()
	err := db.EnsureBridge(short, brIntSpec())
	if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "ovs-vswitchd") {
		t.Errorf("EnsureBridge without ovs-vswitchd = %v, want a deadline naming ovs-vswitchd", err)
	}
	t.Logf("error: %v", err)
}
