package agent

import (
	"context"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/kovs-net/kovs/go-controller/pkg/ovs"
	"github.com/kovs-net/kovs/go-controller/pkg/ovs/ovstest"
	"github.com/kovs-net/kovs/go-controller/pkg/pipeline"
)

// A policy bundle whose datapath caches cannot be invalidated (revalidator/purge, the
// SCTP conntrack flush) is not in force: stale megaflows keep serving the old policy.
// Its generation must stay unsynced (so the policy is not reported realized and CNI
// waiters keep waiting) until a later sync invalidates them, even one that finds nothing
// left to install. Once, the failure was a warning and the generation was reported synced.
// Real OVS (userspace datapath): the bundle goes through br-int.mgmt, the invalidation
// through ovs-vswitchd's unixctl socket, which the test takes away and gives back. With
// each --datapath-invalidation: narrow's dump and deletions go through that socket too.
func TestFailedInvalidationKeepsThePolicyUnrealized(t *testing.T) {
	for _, mode := range []string{DatapathInvalidationNarrow, DatapathInvalidationPurge} {
		t.Run(mode, func(t *testing.T) { failedInvalidationKeepsThePolicyUnrealized(t, mode) })
	}
}

func failedInvalidationKeepsThePolicyUnrealized(t *testing.T, mode string) {
	rig := ovstest.Start(t)
	rig.Vsctl(t, "add-br", "br-int", "--", "set", "bridge", "br-int", "datapath_type=netdev",
		"fail_mode=secure", "protocols=OpenFlow13,OpenFlow14,OpenFlow15")
	of, err := ovs.NewOpenFlow(ovs.OpenFlowConfig{Bridge: "br-int", RunDir: rig.Dir, VswitchdCtl: rig.VswitchdCtl})
	if err != nil {
		t.Fatal(err)
	}
	defer of.Close()
	a := &Agent{of: of, netdev: true, cfg: Config{DatapathInvalidation: mode}}

	// Generation g holds one policy flow per generation up to g.
	gen := uint64(1)
	desired := func() (pipeline.Desired, uint64, error) {
		var flows []pipeline.Flow
		for i := uint64(1); i <= gen; i++ {
			flows = append(flows, pipeline.Flow{Table: pipeline.IngressPolicy, Priority: uint16(100 + i),
				Cookie: pipeline.NewCookie(1, pipeline.CategoryPolicy, uint32(i)), Match: pipeline.MatchAll(),
				Actions: []pipeline.Action{pipeline.Goto(pipeline.Output)}})
		}
		return pipeline.Desire(flows, nil), gen, nil
	}
	s := NewFlowSyncer(OpenFlowSwitch(of), desired, time.Hour)
	s.OnApplied(a.invalidateAfterPolicyChange)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	policyFlows := func() int {
		flows, err := OpenFlowSwitch(of).Flows(ctx)
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, f := range flows {
			if f.Table == pipeline.IngressPolicy.ID {
				n++
			}
		}
		return n
	}

	s.sync(ctx, true)
	if synced, err := s.Synced(); synced != 1 || err != nil {
		t.Fatalf("first sync: generation %d synced (%v), want 1", synced, err)
	}

	// ovs-vswitchd's control socket is gone (as a stale pid-named path is): the bundle
	// goes in, the purge fails.
	away := rig.VswitchdCtl + ".away"
	if err := os.Rename(rig.VswitchdCtl, away); err != nil {
		t.Fatal(err)
	}
	gen = 2
	s.sync(ctx, false)
	if n := policyFlows(); n != 2 {
		t.Fatalf("br-int holds %d policy flows after the second bundle, want 2", n)
	}
	synced, err := s.Synced()
	if synced != 1 {
		t.Errorf("generation %d reported synced though its datapath caches were not invalidated (sync error: %v)", synced, err)
	}
	if err == nil || !strings.Contains(err.Error(), "after a policy change") {
		t.Errorf("sync error %v, want the failed invalidation after a policy change", err)
	}

	// The periodic resync finds every flow in place; the purge still fails: still unsynced.
	s.sync(ctx, true)
	if synced, err := s.Synced(); synced != 1 || err == nil {
		t.Errorf("a resync with nothing to install reported generation %d synced (%v) though the purge still fails", synced, err)
	}

	// The socket is back: the next resync invalidates, and the generation is synced.
	if err := os.Rename(away, rig.VswitchdCtl); err != nil {
		t.Fatal(err)
	}
	s.sync(ctx, true)
	if synced, err := s.Synced(); synced != 2 || err != nil {
		t.Errorf("after the control socket came back: generation %d synced (%v), want 2", synced, err)
	}
}

// TestAutoInvalidationReadsTheRunningVswitchd: --datapath-invalidation=auto asks the real
// ovs-vswitchd its version over its unixctl socket and narrows exactly when that is kovs's
// build (make puts it first in PATH) or a release with upstream's fix; the same question
// after the socket is gone purges.
func TestAutoInvalidationReadsTheRunningVswitchd(t *testing.T) {
	rig := ovstest.Start(t)
	rig.Vsctl(t, "add-br", "br-int", "--", "set", "bridge", "br-int", "datapath_type=netdev")
	of, err := ovs.NewOpenFlow(ovs.OpenFlowConfig{Bridge: "br-int", RunDir: rig.Dir, VswitchdCtl: rig.VswitchdCtl})
	if err != nil {
		t.Fatal(err)
	}
	defer of.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	version, err := of.Vswitchd().Version(ctx)
	if err != nil || !strings.Contains(version, "(Open vSwitch) ") {
		t.Fatalf("Version = %q, %v; want ovs-vswitchd's version line", version, err)
	}
	binary, err := exec.Command("ovs-vswitchd", "--version").Output()
	if err != nil {
		t.Fatal(err)
	}
	if first := strings.SplitN(string(binary), "\n", 2)[0]; strings.TrimSpace(first) != version {
		t.Fatalf("the running ovs-vswitchd says %q, the one in PATH %q", version, first)
	}
	a := &Agent{cfg: Config{DatapathInvalidation: DatapathInvalidationAuto}}
	want := strings.Contains(version, "+kovs") || ovsVersionModifiesByUFID(version)
	if got := a.narrowInvalidation(ctx, of.Vswitchd()); got != want {
		t.Fatalf("auto on %q: narrow = %v, want %v", version, got, want)
	}
	t.Logf("auto on %q: narrow = %v", version, want)
	if err := os.Rename(rig.VswitchdCtl, rig.VswitchdCtl+".away"); err != nil {
		t.Fatal(err)
	}
	a.forgetVswitchdVersion()
	if a.narrowInvalidation(ctx, of.Vswitchd()) {
		t.Fatal("auto without an answer from ovs-vswitchd: narrow, want purge")
	}
}
