package integration

import (
	"context"
	"net"
	"path/filepath"
	"testing"
	"time"

	"github.com/kovs-net/kovs/go-controller/pkg/ovs"
	"github.com/kovs-net/kovs/go-controller/pkg/ovs/ovstest"
)

// TestWatchBridgeSeesVswitchdRestart restarts ovs-vswitchd under a watched bridge: the
// watcher reports the restart once the bridge is back, and an idle connection is not
// reported as one (it answers the switch's echo requests).
func TestWatchBridgeSeesVswitchdRestart(t *testing.T) {
	rig := ovstest.Start(t)
	ctx := testContext(t)
	db := connect(t, ctx, rig)
	if err := db.EnsureBridge(ctx, brIntSpec()); err != nil {
		t.Fatal(err)
	}
	socket := filepath.Join(rig.Dir, "br-int.mgmt")
	waitForSocket(t, socket)

	reconnected := make(chan struct{}, 10)
	watchCtx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		ovs.WatchBridge(watchCtx, socket, func() { reconnected <- struct{}{} })
		close(done)
	}()
	// Idle for longer than the switch's inactivity probe (5 s): still no report.
	select {
	case <-reconnected:
		t.Fatal("reported a restart while ovs-vswitchd kept running")
	case <-time.After(7 * time.Second):
	}

	rig.StopVswitchd(t)
	time.Sleep(300 * time.Millisecond)
	restarted := time.Now()
	rig.StartVswitchd(t)
	select {
	case <-reconnected:
		t.Logf("restart reported %v after ovs-vswitchd was started again", time.Since(restarted).Round(time.Millisecond))
	case <-time.After(15 * time.Second):
		t.Fatal("no restart reported within 15 s of ovs-vswitchd starting again")
	}
	stop()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("WatchBridge did not return after its context ended")
	}
	if n := len(reconnected); n != 0 {
		t.Errorf("%d extra restart reports for one restart", n)
	}
}

func waitForSocket(t *testing.T, path string) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		c, err := net.Dial("unix", path)
		if err == nil {
			c.Close()
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %v", path, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
