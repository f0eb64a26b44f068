package agent

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kovs-net/kovs/go-controller/pkg/pipeline"
)

// fakeSwitch keeps flows as OVS would print them, keyed like the syncer keys them.
type fakeSwitch struct {
	mu    sync.Mutex
	flows map[string]string
	// applies counts bundles; gap records whether any bundle left a key of `watch` absent.
	applies int
}

func newFakeSwitch() *fakeSwitch { return &fakeSwitch{flows: map[string]string{}} }

func (f *fakeSwitch) Apply(_ context.Context, deletes, adds []string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.applies++
	for _, d := range deletes {
		delete(f.flows, d)
	}
	for _, a := range adds {
		key, _ := dumpedFlowKey(a)
		f.flows[key] = a
	}
	return nil
}

func (f *fakeSwitch) Flows(context.Context) ([]string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []string
	for _, v := range f.flows {
		out = append(out, v)
	}
	return out, nil
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
	old := NewFlowSyncer(sw, func() ([]pipeline.Flow, uint64, error) { return testFlows(1, 5), 1, nil }, time.Hour)
	old.sync(context.Background(), true)
	// A foreign flow (cookie category 0) must survive everything.
	_ = sw.Apply(context.Background(), nil, []string{"table=99, priority=1 actions=drop"})

	restarted := NewFlowSyncer(sw, func() ([]pipeline.Flow, uint64, error) { return testFlows(2, 4), 1, nil }, time.Hour)
	restarted.sync(context.Background(), true)
	flows, _ := sw.Flows(context.Background())
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
	s := NewFlowSyncer(sw, func() ([]pipeline.Flow, uint64, error) { return testFlows(1, n), uint64(n), nil }, time.Hour)
	s.sync(context.Background(), true)
	n = 4
	var gotDeletes, gotAdds int
	plannedDeletes, plannedAdds, _ := s.plan(context.Background(), renderFlows(testFlows(1, n)), false)
	gotDeletes, gotAdds = len(plannedDeletes), len(plannedAdds)
	if gotDeletes != 0 || gotAdds != 1 {
		t.Fatalf("incremental plan: %d deletes, %d adds; want 0 and 1", gotDeletes, gotAdds)
	}
}

func TestFullSyncRepairsDrift(t *testing.T) {
	sw := newFakeSwitch()
	s := NewFlowSyncer(sw, func() ([]pipeline.Flow, uint64, error) { return testFlows(1, 3), 1, nil }, time.Hour)
	s.sync(context.Background(), true)
	sw.mu.Lock()
	sw.flows = map[string]string{} // ovs-vswitchd restarted: every flow is gone
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
	s := NewFlowSyncer(sw, func() ([]pipeline.Flow, uint64, error) {
		mu.Lock()
		defer mu.Unlock()
		return testFlows(1, int(gen)), gen, nil
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
		key, owned := dumpedFlowKey(f.String())
		if !owned || key != flowKey(f) {
			t.Errorf("dumped %q -> key %q owned %v; want %q", f.String(), key, owned, flowKey(f))
		}
	}
}

// TestTriggerFullRepairsAtOnce: a restarted ovs-vswitchd (every flow gone) is repaired by
// TriggerFull without waiting for the periodic resync.
func TestTriggerFullRepairsAtOnce(t *testing.T) {
	sw := newFakeSwitch()
	s := NewFlowSyncer(sw, func() ([]pipeline.Flow, uint64, error) { return testFlows(1, 3), 1, nil }, time.Hour)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go s.Run(ctx)
	count := func() int { flows, _ := sw.Flows(ctx); return len(flows) }
	deadline := time.Now().Add(5 * time.Second)
	for count() != 3 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	sw.mu.Lock()
	sw.flows = map[string]string{}
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
