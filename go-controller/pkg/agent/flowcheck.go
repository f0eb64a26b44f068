package agent

import (
	"context"
	"fmt"
	"time"

	log "github.com/sirupsen/logrus"

	"github.com/kovs-net/kovs/go-controller/pkg/ovs"
	"github.com/kovs-net/kovs/go-controller/pkg/pipeline"
)

// CheapResync makes the periodic resyncs between full ones cheap: every resync period the
// syncer counts the switch's flows of its round (one dump-aggregate: ovs-vswitchd counts,
// nothing is dumped or parsed) and compares the count with what it installed; and while
// generation (the desired state's, NodeState.Generation) equals the generation it last
// installed, it compiles nothing. A count that differs (flows deleted, by a del-flows,
// a restarted ovs-vswitchd, a deleted group taking its flows with it; flows of its round
// added) starts a full sync at once, which repairs it. A flow changed in place (a
// mod-flows, an add-flow replacing a kovs flow with one of the same cookie) or a
// modified group keeps the count: the full sync every full period repairs those.
// Call it before Run; full must be at least the resync period.
func (s *FlowSyncer) CheapResync(full time.Duration, generation func() uint64) error {
	if full < s.resync {
		return fmt.Errorf("full resync period %s is shorter than the resync period %s: use at least %s", full, s.resync, s.resync)
	}
	if generation == nil {
		return fmt.Errorf("cheap resyncs need the desired state's generation")
	}
	s.fullPeriod, s.generation = full, generation
	return nil
}

// Resync asks for the periodic resync now (what the resync period's timer asks for): a
// check, or a full sync when no CheapResync was set up or a full one is due.
func (s *FlowSyncer) Resync() {
	s.resyncWanted.Store(true)
	s.runner.Run()
}

// check is a resync between full ones. When the last sync succeeded and the switch holds
// as many flows of the syncer's round as it installed, it is an incremental sync, and
// with the desired state unchanged it is done without compiling; anything else is a full
// sync.
func (s *FlowSyncer) check(ctx context.Context) {
	s.mu.Lock()
	installed, installedGroups, synced, lastErr := s.installed, s.installedGroups, s.synced, s.lastErr
	s.mu.Unlock()
	filter, ok := installedRound(installed)
	if lastErr != nil || !ok {
		s.fullSync(ctx)
		return
	}
	current := s.generation()
	n, err := s.sw.CountFlows(ctx, filter)
	switch {
	case err != nil:
		s.metrics.checked(checkError)
		log.WithError(err).Warn("flow resync: counting the switch's flows failed; syncing fully")
		s.fullSync(ctx)
	case n != len(installed):
		s.metrics.checked(checkDrift)
		log.WithField("switch", n).WithField("installed", len(installed)).
			Warn("flow resync: the switch holds another number of kovs's flows than the agent installed (drift); syncing fully")
		s.fullSync(ctx)
	case current != synced:
		s.metrics.checked(checkClean)
		s.sync(ctx, false)
	default:
		s.metrics.checked(checkClean)
		s.record(pipeline.Desired{Flows: installed, Groups: installedGroups}, synced, false, nil)
		s.notifySynced(synced)
	}
}

// fullSync is a full sync started by the runner's function.
func (s *FlowSyncer) fullSync(ctx context.Context) {
	s.lastFull = time.Now()
	s.sync(ctx, true)
}

// installedRound is the filter that counts the switch's flows of the round the installed
// flows carry: not learned, of that round. ok is false when there is no such round (nothing
// installed, or flows of two rounds, which only a full sync sorts out).
func installedRound(installed map[ovs.FlowKey]ovs.Flow) (filter pipeline.CookieFilter, ok bool) {
	var round pipeline.Round
	for _, f := range installed {
		r := pipeline.Cookie(f.Cookie).Round()
		if ok && r != round {
			return pipeline.CookieFilter{}, false
		}
		round, ok = r, true
	}
	if !ok {
		return pipeline.CookieFilter{}, false
	}
	of, learned := pipeline.RoundFilter(round), pipeline.InstalledFilter()
	return pipeline.CookieFilter{Value: of.Value | learned.Value, Mask: of.Mask | learned.Mask}, true
}
