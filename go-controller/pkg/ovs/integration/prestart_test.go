package integration

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/kovs-net/kovs/go-controller/pkg/ovs"
)

// A bundle process started ahead of its bundle, before ovs-vswitchd restarted, applies
// its bundle to the restarted switch (ovs-ofctl connects only once it has read the whole
// bundle), and reports a bad line as a run of ovs-ofctl per bundle does.
func TestPrestartedBundleOutlivesAVswitchdRestart(t *testing.T) {
	rig, _, ctx := bridgeWithFlows(t)
	of, err := ovs.NewOpenFlow(ovs.OpenFlowConfig{Bridge: "br-int", RunDir: rig.Dir, VswitchdCtl: rig.VswitchdCtl,
		PrestartBundles: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(of.Close)
	waiting := waitingOfctl(t, of, 0)

	rig.StopVswitchd(t)
	time.Sleep(200 * time.Millisecond)
	rig.StartVswitchd(t)
	waitForSocket(t, filepath.Join(rig.Dir, "br-int.mgmt"))
	if err := of.Bundle(ctx, roundFlows(1, 10)); err != nil {
		t.Fatalf("bundle through the process started before the restart: %v", err)
	}
	if alive(waiting) {
		t.Errorf("ovs-ofctl %d, started ahead, still waits: the bundle did not go through it", waiting)
	}
	flows, err := of.DumpFlows(ctx, cookie(1, 0), roundMask)
	if err != nil || len(flows) != 10 {
		t.Fatalf("after the bundle: %d flows of round 1 (%v), want 10", len(flows), err)
	}

	next := waitingOfctl(t, of, waiting)
	mods := roundFlows(2, 10)
	mods[6] = ovs.AddFlow("table=20, priority=200,ip actions=output:9999999")
	err = of.Bundle(ctx, mods)
	var be *ovs.BundleError
	if !errors.As(err, &be) || be.Line != 7 || !strings.Contains(be.Mod, "9999999") {
		t.Fatalf("bad bundle through a process started ahead = %v, want a BundleError naming line 7", err)
	}
	if alive(next) {
		t.Errorf("ovs-ofctl %d, started ahead, still waits: the bad bundle did not go through it", next)
	}
	if flows, _ := of.DumpFlows(ctx, cookie(2, 0), roundMask); len(flows) != 0 {
		t.Errorf("the failed bundle left %d flows", len(flows))
	}
}

// waitingOfctl waits for an ovs-ofctl child of this test, other than not, that of holds
// ready for its next bundle, and returns its process ID. The process shows in /proc as
// soon as it has exec'd, a moment before of takes it over; a bundle in that moment runs a
// fresh ovs-ofctl and leaves this one waiting, so the test waits for both.
func waitingOfctl(t *testing.T, of *ovs.OpenFlow, not int) int {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		pids := childProcesses(t, "ovs-ofctl")
		pids = slices.DeleteFunc(pids, func(p int) bool { return p == not })
		if len(pids) > 1 {
			t.Fatalf("%d ovs-ofctl processes wait for a bundle, want one: %v", len(pids), pids)
		}
		if len(pids) == 1 && of.BundleProcessReady() {
			return pids[0]
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatal("no ovs-ofctl started ahead and ready within 10 s")
	return 0
}

// childProcesses returns this process's children running the program named comm.
func childProcesses(t *testing.T, comm string) []int {
	t.Helper()
	entries, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue // gone meanwhile
		}
		// pid (comm) state ppid ...
		s := string(stat)
		end := strings.LastIndexByte(s, ')')
		if end < 0 || s[strings.IndexByte(s, '(')+1:end] != comm {
			continue
		}
		if fields := strings.Fields(s[end+1:]); len(fields) > 1 && fields[1] == strconv.Itoa(os.Getpid()) {
			pids = append(pids, pid)
		}
	}
	return pids
}

// alive reports whether process pid still exists.
func alive(pid int) bool {
	_, err := os.Stat(filepath.Join("/proc", strconv.Itoa(pid)))
	return err == nil
}
