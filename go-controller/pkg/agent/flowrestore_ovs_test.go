package agent

import (
	"context"
	"net"
	"path/filepath"
	"testing"
	"time"

	"github.com/kovs-net/kovs/go-controller/pkg/ovs/ovstest"
	"github.com/kovs-net/kovs/go-controller/pkg/pipeline"
)

// An ovs-vswitchd started with flow-restore-wait=true (as kovs-ovs starts it) handles no
// packet until the agent clears the key, and the agent clears it only once br-int holds
// its flows again: after a restart the first sync may be an incremental one that trusts
// its record and installs nothing, and clearing then would let traffic meet an empty
// table. Real OVS (userspace datapath).
func TestFlowRestoreWaitClearedOnlyOnceTheFlowsAreBack(t *testing.T) {
	rig := ovstest.StartDatabase(t)
	rig.Vsctl(t, "--no-wait", "init")
	waiting := func() bool {
		return rig.Vsctl(t, "--if-exists", "get", "Open_vSwitch", ".", "other_config:"+FlowRestoreWait) == `"true"`
	}
	startWaiting := func() {
		rig.Vsctl(t, "--no-wait", "set", "Open_vSwitch", ".", "other_config:"+FlowRestoreWait+"=true")
		rig.StartVswitchd(t)
	}
	// br-int's management socket is back once the new ovs-vswitchd has set the bridge up.
	waitBridge := func(ctx context.Context) {
		t.Helper()
		for {
			conn, err := net.Dial("unix", filepath.Join(rig.Dir, "br-int.mgmt"))
			if err == nil {
				conn.Close()
				return
			}
			select {
			case <-ctx.Done():
				t.Fatalf("br-int.mgmt never came back: %v", err)
			case <-time.After(10 * time.Millisecond):
			}
		}
	}
	startWaiting()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	a := &Agent{cfg: Config{NodeName: "node-1", Bridge: "br-int", OVSDB: rig.Endpoint(), OVSRundir: rig.Dir,
		VswitchdCtl: rig.VswitchdCtl, DatapathType: "netdev", LearnedFlowLimit: DefaultLearnedFlowLimit}}
	if err := a.connectOVS(ctx); err != nil {
		t.Fatal(err)
	}
	defer a.store.Close()
	defer a.of.Close()
	flows := testFlows(1, 5)
	a.syncer = NewFlowSyncer(OpenFlowSwitch(a.of), desiredFlows(flows, 1), time.Hour)
	a.syncer.OnSynced(a.endFlowRestoreWait)
	// The key is read from the agent's OVSDB cache: wait until it shows what the test set.
	waitCache := func(want bool) {
		t.Helper()
		for {
			cfg, err := a.store.OtherConfig(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if (cfg[FlowRestoreWait] == "true") == want {
				return
			}
			select {
			case <-ctx.Done():
				t.Fatalf("the agent's OVSDB cache never showed %s=%v", FlowRestoreWait, want)
			case <-time.After(10 * time.Millisecond):
			}
		}
	}
	held := func() int {
		n, err := OpenFlowSwitch(a.of).CountFlows(ctx, pipeline.RoundFilter(1))
		if err != nil {
			t.Fatal(err)
		}
		return n
	}

	waitCache(true)
	a.syncer.sync(ctx, true)
	if n := held(); n != len(flows) {
		t.Fatalf("first sync: br-int holds %d flows, want %d", n, len(flows))
	}
	if waiting() {
		t.Fatalf("%s still set after the first full sync installed every flow", FlowRestoreWait)
	}

	// ovs-vswitchd restarts (its tables gone), started waiting again.
	rig.StopVswitchd(t)
	startWaiting()
	waitBridge(ctx)
	waitCache(true)
	a.syncer.sync(ctx, false) // an incremental sync: nothing changed in the agent's record
	if n := held(); n != 0 {
		t.Fatalf("the incremental sync installed %d flows; the test cannot tell", n)
	}
	if !waiting() {
		t.Fatalf("%s cleared while br-int holds none of its flows", FlowRestoreWait)
	}
	a.syncer.sync(ctx, true) // the full sync the restart asked for (TriggerFull)
	if n := held(); n != len(flows) {
		t.Fatalf("full sync after the restart: br-int holds %d flows, want %d", n, len(flows))
	}
	if waiting() {
		t.Errorf("%s still set after the full sync restored every flow", FlowRestoreWait)
	}
}
