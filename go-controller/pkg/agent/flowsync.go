package agent

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	log "github.com/sirupsen/logrus"

	"github.com/kovs-net/kovs/go-controller/pkg/ovs"
	"github.com/kovs-net/kovs/go-controller/pkg/pipeline"
	"github.com/kovs-net/kovs/go-controller/pkg/runner"
)

// minSyncGap is the shortest time between two flow syncs once syncBurst of them have run
// in a row: the rest of a burst of events becomes one bundle.
const minSyncGap = 20 * time.Millisecond

// syncBurst is how many flow syncs may run back to back before minSyncGap applies. Two,
// as kube-proxy's default: a new pod's own events (its Pod on the informer, then its CNI
// ADD a few milliseconds later) each get a sync at once, instead of the ADD waiting out
// the gap the informer's sync started (half of BenchmarkPodReachable's ADDs waited
// about 20 ms with one).
const syncBurst = 2

// FlowSwitch is the OpenFlow side of br-int the flow syncer needs. It takes and returns
// pkg/ovs values: the syncer never reads or writes flow text.
type FlowSwitch interface {
	// Apply applies the plan in one atomic bundle: all of it or none.
	Apply(ctx context.Context, p SwitchPlan) error
	// Flows returns every installed flow.
	Flows(ctx context.Context) ([]ovs.Flow, error)
	// Groups returns every installed group.
	Groups(ctx context.Context) ([]ovs.Group, error)
	// CountFlows returns how many flows the filter selects, as the switch counts them
	// (without reading the flows).
	CountFlows(ctx context.Context, filter pipeline.CookieFilter) (int, error)
}

// SwitchPlan is one bundle: groups are added and modified first (so that the flows that
// output to them can be added), then flows deleted and added (an add replaces the flow
// with the same key), then the groups no flow needs deleted.
type SwitchPlan struct {
	AddGroups, ModifyGroups []ovs.Group
	DeleteFlows             []ovs.FlowKey
	AddFlows                []ovs.Flow
	DeleteGroups            []uint32
}

// Empty reports whether the plan changes nothing.
func (p SwitchPlan) Empty() bool {
	return len(p.AddGroups)+len(p.ModifyGroups)+len(p.DeleteFlows)+len(p.AddFlows)+len(p.DeleteGroups) == 0
}

// FlowSyncer keeps br-int's flows and groups equal to the desired ones. Event handlers
// only bump the desired state's generation and signal; one goroutine computes the
// difference and applies it as one bundle. It tracks what it installed, so an incremental
// sync touches only what changed; a full sync diffs against the switch's own dumps, which
// repairs drift (a restarted ovs-vswitchd, someone's del-flows) and removes the flows of
// older rounds after an agent restart without ever leaving the switch without its flows.
// Every resync period it resyncs: fully, unless CheapResync made the resyncs between full
// ones a count of the switch's flows (flowcheck.go).
type FlowSyncer struct {
	sw FlowSwitch
	// desired returns the wanted flows and groups (NodeState.Desired).
	desired func() (pipeline.Desired, uint64, error)
	// ownsGroup tells kovs's groups from anyone else's on the switch (the stages').
	ownsGroup func(id uint32) bool
	// resync is how often the syncer resyncs; fullPeriod how often a resync is a full
	// sync, diffing against the switch's own dump (resync unless CheapResync).
	resync, fullPeriod time.Duration
	// generation is the desired state's generation now (nil unless CheapResync): with it,
	// a resync between full ones skips compiling while nothing changed.
	generation func() uint64
	runner     *runner.BoundedFrequencyRunner
	// fullWanted asks the next sync to be a full one, resyncWanted a resync; lastFull and
	// lastResync are when the last of each started (read and written only by the
	// runner's function).
	fullWanted, resyncWanted atomic.Bool
	lastFull, lastResync     time.Time
	ctx                      atomic.Pointer[context.Context]

	mu sync.Mutex
	// installed is what the last successful sync left on the switch; a sync replaces
	// the maps, never changes them.
	installed       map[ovs.FlowKey]ovs.Flow
	installedGroups map[uint32]ovs.Group
	synced          uint64 // generation of the last successful sync
	lastErr         error
	waiters         []waiter
	onSynced        []func(generation uint64)
	onApplied       []func(ctx context.Context, p SwitchPlan) error
	// unsettled is what the bundles whose OnApplied hooks failed changed: the switch holds
	// it, but the sync is not done until the hooks succeed for it (read and written only by
	// the runner's function).
	unsettled SwitchPlan
	// health is when syncs were last attempted and succeeded (see syncHealth).
	health  syncHealth
	metrics *Metrics
}

type waiter struct {
	generation uint64
	ch         chan struct{}
}

// NewFlowSyncer builds a syncer of the kovs pipeline's flows and groups; desired returns
// what the node wants now and the state generation it reflects; resync is how often a
// full sync repairs drift.
func NewFlowSyncer(sw FlowSwitch, desired func() (pipeline.Desired, uint64, error), resync time.Duration) *FlowSyncer {
	return NewFlowSyncerOf(pipeline.Stages(), sw, desired, resync)
}

// NewFlowSyncerOf is NewFlowSyncer for the pipeline of stages (whose groups it owns).
func NewFlowSyncerOf(stages pipeline.Registry, sw FlowSwitch, desired func() (pipeline.Desired, uint64, error),
	resync time.Duration) *FlowSyncer {
	s := &FlowSyncer{sw: sw, desired: desired, ownsGroup: stages.OwnsGroup, resync: resync, fullPeriod: resync,
		installed: map[ovs.FlowKey]ovs.Flow{}, installedGroups: map[uint32]ovs.Group{}}
	s.runner = runner.MustNewBoundedFrequencyRunner("flow sync", s.syncNow,
		runner.Bounds{MinInterval: minSyncGap, MaxInterval: resync, Burst: syncBurst})
	return s
}

// TriggerFull asks for a full resync soon (the switch may have lost its flows, e.g.
// ovs-vswitchd restarted); many triggers coalesce into one.
func (s *FlowSyncer) TriggerFull() {
	s.fullWanted.Store(true)
	s.runner.Run()
}

// Trigger asks for a sync soon; many triggers coalesce into one.
func (s *FlowSyncer) Trigger() { s.runner.Run() }

// Run syncs on every trigger, at most once per minSyncGap after a burst, and fully every
// resync period, until ctx ends. The first sync is a full one.
func (s *FlowSyncer) Run(ctx context.Context) {
	s.ctx.Store(&ctx)
	s.runner.Run()
	s.runner.Loop(ctx)
}

// syncNow is the runner's function: a full sync when one was asked for or is due, else a
// resync (check) when one was asked for or is due, else an incremental sync.
func (s *FlowSyncer) syncNow() {
	ctx, now := *s.ctx.Load(), time.Now()
	resync := s.resyncWanted.Swap(false) || now.Sub(s.lastResync) >= s.resync
	switch {
	case s.fullWanted.Swap(false) || now.Sub(s.lastFull) >= s.fullPeriod || (resync && s.generation == nil):
		s.lastFull, s.lastResync = now, now
		s.sync(ctx, true)
	case resync:
		s.lastResync = now
		s.check(ctx)
	default:
		s.sync(ctx, false)
	}
}

// WaitFor blocks until a sync at or after generation succeeded.
func (s *FlowSyncer) WaitFor(ctx context.Context, generation uint64) error {
	s.mu.Lock()
	if s.synced >= generation {
		s.mu.Unlock()
		return nil
	}
	ch := make(chan struct{})
	s.waiters = append(s.waiters, waiter{generation, ch})
	lastErr := s.lastErr
	s.mu.Unlock()
	s.Trigger()
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		if lastErr != nil {
			return fmt.Errorf("flows not installed: %w", lastErr)
		}
		return fmt.Errorf("flows not installed: %w", ctx.Err())
	}
}

// installedGeneration is the generation of the last successful sync.
func (s *FlowSyncer) installedGeneration() uint64 {
	gen, _ := s.Synced()
	return gen
}

// Synced returns the generation of the last successful sync and the last error.
func (s *FlowSyncer) Synced() (uint64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.synced, s.lastErr
}

func (s *FlowSyncer) sync(ctx context.Context, full bool) {
	start := time.Now()
	want, gen, err := s.desired()
	var plan SwitchPlan
	if err == nil {
		plan, err = s.plan(ctx, want, full)
	}
	if err == nil && !plan.Empty() {
		applyStart := time.Now()
		err = s.sw.Apply(ctx, plan)
		s.metrics.bundleApplied(time.Since(applyStart), err)
	}
	if err == nil {
		if err = s.settle(ctx, plan); err != nil {
			// The switch holds the bundle: later plans start from it, but generation gen
			// is not synced until the hooks succeed, at the next sync.
			s.mu.Lock()
			s.installed, s.installedGroups = want.Flows, want.Groups
			s.mu.Unlock()
		}
	}
	s.metrics.synced(full, time.Since(start), err)
	if !s.record(want, gen, full, err) {
		log.WithError(err).WithField("full", full).Warn("flow sync failed")
		return
	}
	if len(plan.DeleteFlows) > 0 || len(plan.AddFlows) > 0 {
		log.WithField("full", full).WithField("added", len(plan.AddFlows)).WithField("deleted", len(plan.DeleteFlows)).
			WithField("flows", len(want.Flows)).WithField("compiled", want.Compiled).
			WithField("took", time.Since(start).Round(time.Millisecond)).Info("flows synced")
	}
	s.notifySynced(gen)
}

// settle runs the OnApplied hooks for the bundle just applied, plan, together with what
// earlier bundles whose hooks failed changed. An error leaves all of it unsettled, for the
// next sync to settle again.
func (s *FlowSyncer) settle(ctx context.Context, plan SwitchPlan) error {
	p := mergePlans(s.unsettled, plan)
	if p.Empty() {
		return nil
	}
	s.mu.Lock()
	hooks := slices.Clone(s.onApplied)
	s.mu.Unlock()
	for _, h := range hooks {
		if err := h(ctx, p); err != nil {
			s.unsettled = p
			return fmt.Errorf("bundle applied, but not in force: %w", err)
		}
	}
	s.unsettled = SwitchPlan{}
	return nil
}

// notifySynced tells the OnSynced hooks that generation gen is what the switch holds.
func (s *FlowSyncer) notifySynced(gen uint64) {
	s.mu.Lock()
	hooks := slices.Clone(s.onSynced)
	s.mu.Unlock()
	for _, h := range hooks {
		h(gen)
	}
}

// record notes the outcome of a sync of generation gen and reports whether it succeeded.
func (s *FlowSyncer) record(installed pipeline.Desired, gen uint64, full bool, err error) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.lastErr = err
	s.health.note(time.Now(), full, err)
	if err != nil {
		return false
	}
	s.installed, s.installedGroups = installed.Flows, installed.Groups
	s.synced = gen
	s.release(gen)
	return true
}

// mergePlans is what a and then b changed, each flow and group once (b's wins), so what
// stays unsettled through many failed syncs is bounded by the flows and groups there are.
func mergePlans(a, b SwitchPlan) SwitchPlan {
	if a.Empty() {
		return b
	}
	groups := func(x, y []ovs.Group) []ovs.Group {
		byID := map[uint32]int{}
		var out []ovs.Group
		for _, g := range slices.Concat(x, y) {
			if i, ok := byID[g.ID]; ok {
				out[i] = g
				continue
			}
			byID[g.ID] = len(out)
			out = append(out, g)
		}
		return out
	}
	flows := map[ovs.FlowKey]int{}
	var added []ovs.Flow
	for _, f := range slices.Concat(a.AddFlows, b.AddFlows) {
		if i, ok := flows[f.FlowKey]; ok {
			added[i] = f
			continue
		}
		flows[f.FlowKey] = len(added)
		added = append(added, f)
	}
	var deleted []ovs.FlowKey
	seen := map[ovs.FlowKey]bool{}
	for _, k := range slices.Concat(a.DeleteFlows, b.DeleteFlows) {
		if !seen[k] {
			seen[k] = true
			deleted = append(deleted, k)
		}
	}
	deletedGroups := slices.Concat(a.DeleteGroups, b.DeleteGroups)
	slices.Sort(deletedGroups)
	return SwitchPlan{AddGroups: groups(a.AddGroups, b.AddGroups), ModifyGroups: groups(a.ModifyGroups, b.ModifyGroups),
		DeleteFlows: deleted, AddFlows: added, DeleteGroups: slices.Compact(deletedGroups)}
}

// OnApplied registers f to be called after every bundle the switch accepted, with what it
// changed: what makes the bundle take effect. An error from f fails the sync: its
// generation is not synced (waiters keep waiting, the policy is not reported realized)
// and the next sync, at the latest the next resync, calls f again with the same changes
// and any newer ones.
func (s *FlowSyncer) OnApplied(f func(ctx context.Context, p SwitchPlan) error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.onApplied = append(s.onApplied, f)
}

// OnSynced registers f to be called, outside the syncer's lock, with the generation of
// every successful sync.
func (s *FlowSyncer) OnSynced(f func(generation uint64)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.onSynced = append(s.onSynced, f)
}

// release wakes the waiters the sync of gen satisfied. Called with mu held.
func (s *FlowSyncer) release(gen uint64) {
	kept := s.waiters[:0]
	for _, w := range s.waiters {
		if w.generation <= gen {
			close(w.ch)
		} else {
			kept = append(kept, w)
		}
	}
	s.waiters = kept
}
