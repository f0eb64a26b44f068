package agent

import (
	"context"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kovs-net/kovs/go-controller/pkg/ovs"
	"github.com/kovs-net/kovs/go-controller/pkg/pipeline"
)

// fakeSwitch keeps flows and groups as OVS would dump them.
type fakeSwitch struct {
	mu     sync.Mutex
	flows  map[ovs.FlowKey]ovs.Flow
	groups map[uint32]ovs.Group
	// applies counts bundles.
	applies int
}

func newFakeSwitch() *fakeSwitch {
	return &fakeSwitch{flows: map[ovs.FlowKey]ovs.Flow{}, groups: map[uint32]ovs.Group{}}
}

func (f *fakeSwitch) Apply(_ context.Context, p SwitchPlan) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.applies++
	for _, g := range slices.Concat(p.AddGroups, p.ModifyGroups) {
		f.groups[g.ID] = g
	}
	for _, k := range p.DeleteFlows {
		delete(f.flows, k)
	}
	for _, a := range p.AddFlows {
		f.flows[a.FlowKey] = a
	}
	for _, id := range p.DeleteGroups {
		delete(f.groups, id)
	}
	return nil
}

func (f *fakeSwitch) Flows(context.Context) ([]ovs.Flow, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Collect(maps.Values(f.flows)), nil
}

func (f *fakeSwitch) Groups(context.Context) ([]ovs.Group, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Collect(maps.Values(f.groups)), nil
}

// dumpedFlow is a flow given as dump-flows prints it.
func dumpedFlow(t *testing.T, text string) ovs.Flow {
	t.Helper()
	e, err := ovs.ParseFlow(text)
	if err != nil {
		t.Fatal(err)
	}
	flow, err := e.Flow()
	if err != nil {
		t.Fatal(err)
	}
	return flow
}

// add installs a flow given as dump-flows prints it, as if someone else had.
func (f *fakeSwitch) add(t *testing.T, text string) ovs.Flow {
	t.Helper()
	flow := dumpedFlow(t, text)
	f.mu.Lock()
	defer f.mu.Unlock()
	f.flows[flow.FlowKey] = flow
	return flow
}

// texts are the switch's flows as dump-flows prints them.
func (f *fakeSwitch) texts() []string {
	flows, _ := f.Flows(context.Background())
	out := make([]string, len(flows))
	for i, fl := range flows {
		out[i] = fl.String()
	}
	return out
}

// desiredFlows is a desired state of flows alone.
func desiredFlows(flows []pipeline.Flow, gen uint64) func() (pipeline.Desired, uint64, error) {
	return func() (pipeline.Desired, uint64, error) { return pipeline.Desire(flows, nil), gen, nil }
}

func testFlows(round pipeline.Round, n int) []pipeline.Flow {
	flows := make([]pipeline.Flow, n)
	for i := range flows {
		flows[i] = pipeline.Flow{Table: pipeline.L3Forwarding, Priority: uint16(100 + i),
			Cookie: pipeline.NewCookie(round, pipeline.CategoryBase, uint32(i)), Match: pipeline.MatchAll(),
			Actions: []pipeline.Action{pipeline.Goto(pipeline.Output)}}
	}
	return flows
}

func TestRestartReplacesOldRoundWithoutGap(t *testing.T) {
	sw := newFakeSwitch()
	old := NewFlowSyncer(sw, desiredFlows(testFlows(1, 5), 1), time.Hour)
	old.sync(context.Background(), true)
	// A foreign flow (cookie category 0) must survive everything.
	sw.add(t, "table=99, priority=1 actions=drop")

	restarted := NewFlowSyncer(sw, desiredFlows(testFlows(2, 4), 1), time.Hour)
	restarted.sync(context.Background(), true)
	flows := sw.texts()
	if len(flows) != 5 {
		t.Fatalf("after restart: %d flows, want 4 of round 2 and the foreign one:\n%s", len(flows), strings.Join(flows, "\n"))
	}
	for _, f := range flows {
		if strings.Contains(f, "table=99") {
			continue
		}
		if !strings.HasPrefix(f, "cookie=0x2") {
			t.Errorf("stale flow kept: %s", f)
		}
	}
}

func TestIncrementalSyncTouchesOnlyChanges(t *testing.T) {
	sw := newFakeSwitch()
	n := 3
	s := NewFlowSyncer(sw, desiredFlows(testFlows(1, n), uint64(n)), time.Hour)
	s.sync(context.Background(), true)
	n = 4
	var gotDeletes, gotAdds int
	plan, _ := s.plan(context.Background(), pipeline.Desire(testFlows(1, n), nil), false)
	gotDeletes, gotAdds = len(plan.DeleteFlows), len(plan.AddFlows)
	if gotDeletes != 0 || gotAdds != 1 {
		t.Fatalf("incremental plan: %d deletes, %d adds; want 0 and 1", gotDeletes, gotAdds)
	}
}

func TestFullSyncRepairsDrift(t *testing.T) {
	sw := newFakeSwitch()
	s := NewFlowSyncer(sw, desiredFlows(testFlows(1, 3), 1), time.Hour)
	s.sync(context.Background(), true)
	sw.mu.Lock()
	sw.flows = map[ovs.FlowKey]ovs.Flow{} // ovs-vswitchd restarted: every flow is gone
	sw.mu.Unlock()
	s.sync(context.Background(), false)
	if flows, _ := sw.Flows(context.Background()); len(flows) != 0 {
		t.Fatalf("an incremental sync should trust its own record (got %d flows)", len(flows))
	}
	s.sync(context.Background(), true)
	if flows, _ := sw.Flows(context.Background()); len(flows) != 3 {
		t.Fatalf("full sync restored %d flows, want 3", len(flows))
	}
}

func TestWaitForReturnsOnceGenerationSynced(t *testing.T) {
	sw := newFakeSwitch()
	var mu sync.Mutex
	gen := uint64(1)
	s := NewFlowSyncer(sw, func() (pipeline.Desired, uint64, error) {
		mu.Lock()
		defer mu.Unlock()
		return pipeline.Desire(testFlows(1, int(gen)), nil), gen, nil
	}, time.Hour)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go s.Run(ctx)
	mu.Lock()
	gen = 7
	mu.Unlock()
	wctx, wcancel := context.WithTimeout(ctx, 5*time.Second)
	defer wcancel()
	if err := s.WaitFor(wctx, 7); err != nil {
		t.Fatal(err)
	}
	if g, _ := s.Synced(); g < 7 {
		t.Fatalf("synced generation %d", g)
	}
}

func TestDumpedFlowKeyMatchesFlowKey(t *testing.T) {
	for _, f := range append(testFlows(3, 2), pipeline.Flow{Table: pipeline.Classifier, Priority: 0,
		Cookie: pipeline.NewCookie(3, pipeline.CategoryBase, 0)}) {
		e, err := ovs.ParseFlow(f.String())
		dumped, ferr := e.Flow()
		owned := pipeline.Cookie(dumped.Cookie).Owned() && !pipeline.Cookie(dumped.Cookie).Learned()
		if err != nil || ferr != nil || !owned || dumped.FlowKey != f.Key() {
			t.Errorf("dumped %q -> key %q owned %v (%v, %v); want %q", f.String(), dumped.FlowKey, owned, err, ferr, f.Key())
		}
	}
}

// TestTriggerFullRepairsAtOnce: a restarted ovs-vswitchd (every flow gone) is repaired by
// TriggerFull without waiting for the periodic resync.
func TestTriggerFullRepairsAtOnce(t *testing.T) {
	sw := newFakeSwitch()
	s := NewFlowSyncer(sw, desiredFlows(testFlows(1, 3), 1), time.Hour)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go s.Run(ctx)
	count := func() int { flows, _ := sw.Flows(ctx); return len(flows) }
	deadline := time.Now().Add(5 * time.Second)
	for count() != 3 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	sw.mu.Lock()
	sw.flows = map[ovs.FlowKey]ovs.Flow{}
	sw.mu.Unlock()
	s.Trigger() // an incremental sync trusts its record: nothing comes back
	time.Sleep(50 * time.Millisecond)
	if n := count(); n != 0 {
		t.Fatalf("incremental sync restored %d flows; the test cannot tell TriggerFull apart", n)
	}
	s.TriggerFull()
	for count() != 3 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if n := count(); n != 3 {
		t.Fatalf("after TriggerFull: %d flows, want 3", n)
	}
}

// What stays unsettled through failed OnApplied hooks holds each flow and group once,
// however many syncs failed: it does not grow with them.
func TestMergePlansKeepsEachFlowOnce(t *testing.T) {
	flows := testFlows(1, 3)
	var plans []SwitchPlan
	for i := range 3 {
		plans = append(plans, SwitchPlan{
			AddFlows:     []ovs.Flow{dumpedFlow(t, flows[i].String()), dumpedFlow(t, flows[0].String())},
			DeleteFlows:  []ovs.FlowKey{flows[2].Key()},
			AddGroups:    []ovs.Group{{ID: 7}},
			DeleteGroups: []uint32{9},
		})
	}
	var unsettled SwitchPlan
	for range 100 {
		for _, p := range plans {
			unsettled = mergePlans(unsettled, p)
		}
	}
	if len(unsettled.AddFlows) != 3 || len(unsettled.DeleteFlows) != 1 || len(unsettled.AddGroups) != 1 || len(unsettled.DeleteGroups) != 1 {
		t.Errorf("after 300 merges: %d added flows (want 3), %d deleted (1), %d added groups (1), %d deleted groups (1)",
			len(unsettled.AddFlows), len(unsettled.DeleteFlows), len(unsettled.AddGroups), len(unsettled.DeleteGroups))
	}
	if !touchesPolicy(changedFlows(mergePlans(SwitchPlan{DeleteFlows: keysOf(t, []string{"table=70,priority=100,reg1=0x5"})}, plans[0]))) {
		t.Error("a merge lost the policy flow the first plan deleted")
	}
}
