package agent

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	log "github.com/sirupsen/logrus"

	"github.com/kovs-net/kovs/go-controller/pkg/pipeline"
	"github.com/kovs-net/kovs/go-controller/pkg/runner"
)

// minSyncGap is the shortest time between two flow syncs once a burst of events has been
// served: bursts of events become one bundle.
const minSyncGap = 20 * time.Millisecond

// FlowSwitch is the OpenFlow side of br-int the flow syncer needs.
type FlowSwitch interface {
	// Apply deletes and adds flows in one atomic bundle (deletes first). Adds are flow
	// texts as pipeline.Flow.String() renders them; deletes are "table=N,priority=P,match".
	Apply(ctx context.Context, deletes, adds []string) error
	// Flows returns the installed flows, rendered as `dump-flows --no-stats --no-names`.
	Flows(ctx context.Context) ([]string, error)
}

// FlowSyncer keeps br-int's flows equal to the desired flows. Event handlers only bump
// the desired state's generation and signal; one goroutine computes the difference and
// applies it as one bundle. It tracks what it installed, so an incremental sync touches
// only what changed; a full sync diffs against the switch's own dump, which repairs drift
// (a restarted ovs-vswitchd, someone's del-flows) and removes the flows of older rounds
// after an agent restart without ever leaving the switch without its flows.
type FlowSyncer struct {
	sw FlowSwitch
	// desired returns the wanted flows rendered (flow key -> text, see renderFlows).
	desired func() (flows map[string]string, generation uint64, err error)
	// resync is how often a full sync diffs against the switch's own dump.
	resync time.Duration
	runner *runner.BoundedFrequencyRunner
	// fullWanted asks the next sync to be a full one; lastFull is when the last full
	// sync started (read and written only by the runner's function).
	fullWanted atomic.Bool
	lastFull   time.Time
	ctx        atomic.Pointer[context.Context]

	mu        sync.Mutex
	installed map[string]string // flow key -> full text
	synced    uint64            // generation of the last successful sync
	lastErr   error
	waiters   []waiter
	onSynced  []func(generation uint64)
	onApplied []func(ctx context.Context, deletes, adds []string)
	// health is when syncs were last attempted and succeeded (see syncHealth).
	health  syncHealth
	metrics *Metrics
}

type waiter struct {
	generation uint64
	ch         chan struct{}
}

// NewFlowSyncer builds a syncer; desired returns the flows the node wants now and the
// state generation they reflect; resync is how often a full sync repairs drift.
func NewFlowSyncer(sw FlowSwitch, desired func() ([]pipeline.Flow, uint64, error), resync time.Duration) *FlowSyncer {
	return NewRenderedFlowSyncer(sw, func() (map[string]string, uint64, error) {
		flows, gen, err := desired()
		if err != nil {
			return nil, gen, err
		}
		return renderFlows(flows), gen, nil
	}, resync)
}

// NewRenderedFlowSyncer builds a syncer whose desired flows come rendered (flow key ->
// text, as renderFlows renders them), so the source can keep renderings that did not
// change (NodeState.RenderedFlows).
func NewRenderedFlowSyncer(sw FlowSwitch, desired func() (map[string]string, uint64, error), resync time.Duration) *FlowSyncer {
	s := &FlowSyncer{sw: sw, desired: desired, resync: resync, installed: map[string]string{}}
	s.runner = runner.MustNewBoundedFrequencyRunner("flow sync", s.syncNow,
		runner.Bounds{MinInterval: minSyncGap, MaxInterval: resync, Burst: 1})
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

// syncNow is the runner's function: a full sync when one was asked for or is due.
func (s *FlowSyncer) syncNow() {
	full := s.fullWanted.Swap(false) || time.Since(s.lastFull) >= s.resync
	if full {
		s.lastFull = time.Now()
	}
	s.sync(*s.ctx.Load(), full)
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
	var deletes, adds []string
	if err == nil {
		deletes, adds, err = s.plan(ctx, want, full)
	}
	groupsChanged := false
	if gs, ok := s.sw.(groupPlanner); ok && err == nil {
		groupsChanged, err = gs.planGroups(ctx, full) // applied by sw.Apply, in the same bundle
	}
	if err == nil && (len(deletes) > 0 || len(adds) > 0 || groupsChanged) {
		applyStart := time.Now()
		err = s.sw.Apply(ctx, deletes, adds)
		s.metrics.bundleApplied(time.Since(applyStart), err)
		if err == nil {
			s.mu.Lock()
			applied := slices.Clone(s.onApplied)
			s.mu.Unlock()
			for _, h := range applied {
				h(ctx, deletes, adds)
			}
		}
	}
	s.metrics.synced(full, time.Since(start), err)
	if !s.record(want, gen, full, err) {
		log.WithError(err).WithField("full", full).Warn("flow sync failed")
		return
	}
	if len(deletes) > 0 || len(adds) > 0 {
		log.WithField("full", full).WithField("added", len(adds)).WithField("deleted", len(deletes)).
			WithField("flows", len(want)).WithField("took", time.Since(start).Round(time.Millisecond)).Info("flows synced")
	}
	s.mu.Lock()
	hooks := slices.Clone(s.onSynced)
	s.mu.Unlock()
	for _, h := range hooks {
		h(gen)
	}
}

// record notes the outcome of a sync of generation gen and reports whether it succeeded.
func (s *FlowSyncer) record(installed map[string]string, gen uint64, full bool, err error) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.lastErr = err
	s.health.note(time.Now(), full, err)
	if err != nil {
		return false
	}
	s.installed = installed
	s.synced = gen
	s.release(gen)
	return true
}

// OnApplied registers f to be called after every bundle the switch accepted, with what it
// deleted and added.
func (s *FlowSyncer) OnApplied(f func(ctx context.Context, deletes, adds []string)) {
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

// plan returns the bundle that turns the installed flows into flows: against what this
// syncer installed (incremental) or against the switch's dump (full).
func (s *FlowSyncer) plan(ctx context.Context, want map[string]string, full bool) (deletes, adds []string, err error) {
	var have map[string]string
	if full {
		have = map[string]string{}
		dump, err := s.sw.Flows(ctx)
		if err != nil {
			return nil, nil, err
		}
		for _, text := range dump {
			if key, owned := dumpedFlowKey(text); owned {
				have[key] = text
			}
		}
	} else {
		// record replaces the map, never changes it: reading it needs no copy.
		s.mu.Lock()
		have = s.installed
		s.mu.Unlock()
	}
	for key, text := range want {
		if have[key] != text {
			adds = append(adds, text) // a flow add with the same match replaces the flow
		}
	}
	for key := range have {
		if _, ok := want[key]; !ok {
			deletes = append(deletes, key)
		}
	}
	return deletes, adds, nil
}

// renderFlows renders every flow once, keyed as OpenFlow identifies it: a sync compares,
// applies and records these texts without rendering any flow again.
func renderFlows(flows []pipeline.Flow) map[string]string {
	out := make(map[string]string, len(flows))
	for _, f := range flows {
		out[flowKey(f)] = f.String()
	}
	return out
}

// flowKey identifies a flow by what OpenFlow identifies it by: table, priority, match.
func flowKey(f pipeline.Flow) string {
	return matchKey(strconv.Itoa(int(f.Table.ID)), strconv.Itoa(int(f.Priority)), f.Match.String())
}

func matchKey(table, priority, match string) string {
	if match == "" {
		return "table=" + table + ",priority=" + priority
	}
	return "table=" + table + ",priority=" + priority + "," + match
}

// dumpedFlowKey parses a dump-flows line into the same key, and reports whether kovs owns
// and installs the flow (a non-zero cookie category other than learned).
func dumpedFlowKey(line string) (string, bool) {
	line = strings.TrimSpace(line)
	var cookie pipeline.Cookie
	if rest, ok := strings.CutPrefix(line, "cookie="); ok {
		v, after, _ := strings.Cut(rest, ", ")
		var c uint64
		if _, err := fmt.Sscanf(v, "0x%x", &c); err != nil {
			return "", false
		}
		cookie, line = pipeline.Cookie(c), after
	}
	if !cookie.Owned() || cookie.Learned() {
		// Learned flows are the switch's own (SCTP replies): kovs never installs them.
		return "", false
	}
	head, _, _ := strings.Cut(line, " actions=")
	table := "0"
	if rest, ok := strings.CutPrefix(head, "table="); ok {
		table, head, _ = strings.Cut(rest, ", ")
	}
	prio, match, _ := strings.Cut(strings.TrimPrefix(head, "priority="), ",")
	return matchKey(table, prio, match), true
}
