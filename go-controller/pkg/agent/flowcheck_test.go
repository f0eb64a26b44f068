package agent

import (
	"context"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kovs-net/kovs/go-controller/pkg/ovs"
	"github.com/kovs-net/kovs/go-controller/pkg/pipeline"
)

// CountFlows implements FlowSwitch: the flows the filter selects, as dump-aggregate counts.
func (f *fakeSwitch) CountFlows(_ context.Context, filter pipeline.CookieFilter) (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := 0
	for _, fl := range f.flows {
		if filter.Matches(pipeline.Cookie(fl.Cookie)) {
			n++
		}
	}
	return n, nil
}

// readsSwitch is a fake switch that counts the syncer's dumps and counts.
type readsSwitch struct {
	*fakeSwitch
	dumps, counts atomic.Int32
}

func (r *readsSwitch) Flows(ctx context.Context) ([]ovs.Flow, error) {
	r.dumps.Add(1)
	return r.fakeSwitch.Flows(ctx)
}

func (r *readsSwitch) CountFlows(ctx context.Context, filter pipeline.CookieFilter) (int, error) {
	r.counts.Add(1)
	return r.fakeSwitch.CountFlows(ctx, filter)
}

// desiredRig is a desired state of n flows of round 1 whose compilations are counted;
// a change bumps the generation.
type desiredRig struct {
	mu       sync.Mutex
	n        int
	gen      uint64
	compiled int
}

func (d *desiredRig) desired() (pipeline.Desired, uint64, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.compiled++
	return pipeline.Desire(testFlows(1, d.n), nil), d.gen, nil
}

func (d *desiredRig) generation() uint64 {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.gen
}

func (d *desiredRig) compilations() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.compiled
}

// newCheckedSyncer is a syncer of 3 flows with cheap resyncs, after its first full sync.
func newCheckedSyncer(t *testing.T) (*FlowSyncer, *readsSwitch, *desiredRig) {
	t.Helper()
	sw := &readsSwitch{fakeSwitch: newFakeSwitch()}
	d := &desiredRig{n: 3, gen: 1}
	s := NewFlowSyncer(sw, d.desired, time.Hour)
	if err := s.CheapResync(time.Hour, d.generation); err != nil {
		t.Fatal(err)
	}
	s.sync(context.Background(), true)
	if n := len(sw.texts()); n != 3 {
		t.Fatalf("first full sync installed %d flows, want 3", n)
	}
	return s, sw, d
}

// TestIdleResyncReadsNoFlowsAndCompilesNothing: with nothing changed, a resync between
// full ones is one count of the switch's flows: no dump, no compilation, no bundle.
func TestIdleResyncReadsNoFlowsAndCompilesNothing(t *testing.T) {
	s, sw, d := newCheckedSyncer(t)
	dumps, compiled, applies := sw.dumps.Load(), d.compilations(), sw.applies
	for range 3 {
		s.check(context.Background())
	}
	if got := sw.dumps.Load() - dumps; got != 0 {
		t.Errorf("3 idle resyncs dumped the switch's flows %d times, want 0", got)
	}
	if got := d.compilations() - compiled; got != 0 {
		t.Errorf("3 idle resyncs compiled the desired state %d times, want 0", got)
	}
	if got := sw.counts.Load(); got != 3 {
		t.Errorf("3 idle resyncs counted the switch's flows %d times, want 3", got)
	}
	if sw.applies != applies {
		t.Errorf("idle resyncs applied %d bundles", sw.applies-applies)
	}
	if gen, err := s.Synced(); gen != 1 || err != nil {
		t.Errorf("after idle resyncs: synced generation %d, error %v; want 1 and none", gen, err)
	}
}

// TestResyncRepairsDeletedFlows: flows someone deleted (ovs-ofctl del-flows) change the
// count; the resync then syncs fully and puts them back.
func TestResyncRepairsDeletedFlows(t *testing.T) {
	s, sw, _ := newCheckedSyncer(t)
	sw.mu.Lock()
	for key := range sw.flows {
		delete(sw.flows, key) // one of them
		break
	}
	sw.mu.Unlock()
	// A foreign flow (cookie 0) neither counts nor is touched.
	sw.add(t, "table=99, priority=1 actions=drop")
	dumps := sw.dumps.Load()
	s.check(context.Background())
	if flows := sw.texts(); len(flows) != 4 {
		t.Fatalf("after the resync: %d flows, want the 3 restored and the foreign one:\n%s", len(flows), strings.Join(flows, "\n"))
	}
	if sw.dumps.Load() == dumps {
		t.Errorf("the repair did not dump the switch's flows: it cannot have diffed them")
	}
}

// TestResyncRemovesAddedFlowOfItsRound: a flow of the agent's own round it did not install
// (the count is higher) is removed.
func TestResyncRemovesAddedFlowOfItsRound(t *testing.T) {
	s, sw, _ := newCheckedSyncer(t)
	extra := pipeline.Flow{Table: pipeline.L3Forwarding, Priority: 7, Cookie: pipeline.NewCookie(1, pipeline.CategoryPod, 99),
		Match: pipeline.MatchAll(), Actions: []pipeline.Action{pipeline.Goto(pipeline.Output)}}
	sw.add(t, extra.String())
	s.check(context.Background())
	if flows := sw.texts(); len(flows) != 3 {
		t.Fatalf("after the resync: %d flows, want the 3 installed:\n%s", len(flows), strings.Join(flows, "\n"))
	}
}

// TestResyncAppliesPendingChange: a resync while a change is pending (its generation not
// installed yet) installs it, as the incremental sync it triggered would.
func TestResyncAppliesPendingChange(t *testing.T) {
	s, sw, d := newCheckedSyncer(t)
	d.mu.Lock()
	d.n, d.gen = 4, 2
	d.mu.Unlock()
	dumps := sw.dumps.Load()
	s.check(context.Background())
	if n := len(sw.texts()); n != 4 {
		t.Fatalf("after the resync: %d flows, want 4", n)
	}
	if gen, _ := s.Synced(); gen != 2 {
		t.Errorf("synced generation %d, want 2", gen)
	}
	if sw.dumps.Load() != dumps {
		t.Errorf("a pending change with the count right dumped the switch's flows")
	}
}

// TestFullResyncRepairsFlowChangedInPlace: a flow whose actions someone changed
// (ovs-ofctl mod-flows keeps its cookie) keeps the count, so the resyncs in between miss
// it; the full resync every full period repairs it. Run with the periods short.
func TestFullResyncRepairsFlowChangedInPlace(t *testing.T) {
	sw := &readsSwitch{fakeSwitch: newFakeSwitch()}
	d := &desiredRig{n: 3, gen: 1}
	s := NewFlowSyncer(sw, d.desired, 25*time.Millisecond)
	const full = 500 * time.Millisecond
	if err := s.CheapResync(full, d.generation); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go s.Run(ctx)
	deadline := time.Now().Add(10 * time.Second)
	for len(sw.texts()) != 3 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	want, _ := changeFlowInPlace(sw)
	for time.Now().Before(deadline) {
		sw.mu.Lock()
		repaired := sw.flows[want.FlowKey] == want
		sw.mu.Unlock()
		if repaired {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	sw.mu.Lock()
	got := sw.flows[want.FlowKey]
	sw.mu.Unlock()
	if got != want {
		t.Fatalf("the flow changed in place is still %s, want %s", got, want)
	}
	if sw.counts.Load() == 0 {
		t.Errorf("no resync counted the switch's flows between the full ones")
	}
}

// TestResyncMissesFlowChangedInPlace is the count's limit, stated: a flow changed in
// place keeps the count, and only a full sync repairs it.
func TestResyncMissesFlowChangedInPlace(t *testing.T) {
	s, sw, _ := newCheckedSyncer(t)
	want, changed := changeFlowInPlace(sw)
	s.check(context.Background())
	if got := sw.flows[want.FlowKey]; got != changed {
		t.Fatalf("the resync between full ones changed the flow to %s: update this test and the docs, the count now sees more", got)
	}
	s.sync(context.Background(), true)
	if got := sw.flows[want.FlowKey]; got != want {
		t.Fatalf("after a full sync the flow is %s, want %s", got, want)
	}
}

func TestCheapResyncRefusesAFullPeriodBelowTheResync(t *testing.T) {
	s := NewFlowSyncer(newFakeSwitch(), desiredFlows(testFlows(1, 1), 1), time.Minute)
	if err := s.CheapResync(time.Second, func() uint64 { return 1 }); err == nil ||
		!strings.Contains(err.Error(), "shorter than the resync period") {
		t.Errorf("CheapResync(1s) with a 1m resync: %v, want an error saying the full period is shorter", err)
	}
	if err := s.CheapResync(time.Hour, nil); err == nil {
		t.Error("CheapResync without a generation: no error")
	}
}

func TestConfigRefusesAFullResyncPeriodBelowTheResyncPeriod(t *testing.T) {
	c := Config{NodeName: "node1", OVSDB: "unix:/run/db.sock", ClusterCIDRs: []netip.Prefix{netip.MustParsePrefix("10.244.0.0/16")},
		CNISocket: "/run/kovs/cni.sock", ResyncPeriod: time.Minute, FullResyncPeriod: time.Second}
	c.Defaults()
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "--full-resync-period 1s") {
		t.Errorf("Validate = %v, want an error naming --full-resync-period", err)
	}
	c.FullResyncPeriod = 0
	c.Defaults()
	if err := c.Validate(); err != nil || c.FullResyncPeriod != DefaultFullResyncPeriod {
		t.Errorf("defaults: full resync period %s, Validate = %v; want %s and no error", c.FullResyncPeriod, err, DefaultFullResyncPeriod)
	}
}

// changeFlowInPlace replaces the first test flow on sw with one of the same key and
// cookie that drops, as an operator's mod-flows would; it returns the flow as it was and
// as it is now.
func changeFlowInPlace(sw *readsSwitch) (want, changed ovs.Flow) {
	want = testFlows(1, 3)[0].Rendered()
	changed = want
	changed.Actions = "drop"
	sw.mu.Lock()
	sw.flows[want.FlowKey] = changed
	sw.mu.Unlock()
	return want, changed
}

func TestConfigPolicyWait(t *testing.T) {
	c := Config{NodeName: "node1", OVSDB: "unix:/run/db.sock", ClusterCIDRs: []netip.Prefix{netip.MustParsePrefix("10.244.0.0/16")},
		CNISocket: "/run/kovs/cni.sock", PolicyWait: -time.Second}
	c.Defaults()
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "--policy-wait -1s") {
		t.Errorf("Validate = %v, want an error naming --policy-wait", err)
	}
	c.PolicyWait = 0
	c.Defaults()
	if err := c.Validate(); err != nil || c.PolicyWait != DefaultPolicyWait {
		t.Errorf("defaults: policy wait %s, Validate = %v; want %s and no error", c.PolicyWait, err, DefaultPolicyWait)
	}
	c.PolicyWait = 5 * time.Second
	c.Defaults()
	if err := c.Validate(); err != nil || c.PolicyWait != 5*time.Second {
		t.Errorf("policy wait 5s: kept %s, Validate = %v", c.PolicyWait, err)
	}
}
