package harness

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	log "github.com/sirupsen/logrus"
	"golang.org/x/time/rate"
)

// maxInFlight bounds the churn's concurrent writes: if kube-apiserver cannot keep up,
// the achieved rate (reported) falls below the asked one instead of piling up requests.
const maxInFlight = 256

// livePolicies is how many churn policies exist at once: after the first ones, every
// policy change alternates a deletion of the oldest and a creation.
const livePolicies = 20

// churnCounts are the writes the churn made.
type churnCounts struct {
	PodsCreated, PodsDeleted, PolicyChanges, Failed atomic.Int64
}

// churn creates and deletes pods at PodChurnPerSecond each and changes policies at
// PolicyChurnPerSec for ChurnDuration, then waits for the last changes to be realized.
func (h *Harness) churn(ctx context.Context) error {
	var err error
	h.result.Churn, err = h.churnAt(ctx, h.cfg.PodChurnPerSecond, h.cfg.PolicyChurnPerSec, h.cfg.ChurnDuration, "churn")
	return err
}

// churnAt churns at the given rates for d; its pods and policies are named after prefix.
func (h *Harness) churnAt(ctx context.Context, podsPerSecond, policiesPerSecond int, d time.Duration, prefix string) (ChurnResult, error) {
	var res ChurnResult
	h.alloc.results() // the churn's allocation sample starts empty
	h.alloc.afterCreateResults()
	h.alloc.splitResults()
	h.realization.finishedResults() // the probes' changes are not the churn's
	before := h.trafficByNode()
	reconciles, reconcilesErr := h.reconcileStats(ctx, "pod-bandwidth")
	split, splitErr := h.controllerSplit(ctx)
	start := time.Now()
	stop := start.Add(d)
	slots := make(chan struct{}, maxInFlight)
	var writes sync.WaitGroup
	var counts churnCounts
	spawn := func(f func() error, ok *atomic.Int64) {
		slots <- struct{}{}
		writes.Go(func() {
			defer func() { <-slots }()
			if err := f(); err != nil {
				counts.Failed.Add(1)
				log.WithError(err).Warn("churn write failed")
				return
			}
			ok.Add(1)
		})
	}
	var loops sync.WaitGroup
	every := func(perSecond int, op func(n int)) {
		if perSecond == 0 {
			return
		}
		loops.Go(func() {
			lim := rate.NewLimiter(rate.Limit(perSecond), 1)
			for n := 0; time.Now().Before(stop); n++ {
				if lim.Wait(ctx) != nil {
					return
				}
				op(n)
			}
		})
	}
	every(podsPerSecond, func(n int) {
		sel := h.model.randomSelector()
		ref := podRef{sel.Namespace, fmt.Sprintf("%s-%d", prefix, n)}
		spawn(func() error { return h.createPod(ctx, ref, sel.App) }, &counts.PodsCreated)
	})
	every(podsPerSecond, func(int) {
		if ref, ok := h.model.randomPod(); ok {
			spawn(func() error { return h.deletePod(ctx, ref) }, &counts.PodsDeleted)
		}
	})
	every(policiesPerSecond, func(n int) {
		name, sel, create := h.churnPolicies.next(fmt.Sprintf("%s-%d", prefix, n), h.model.randomSelector)
		spawn(func() error {
			_, err := h.changePolicy(ctx, name, sel, create, h.model.spans(sel))
			return err
		}, &counts.PolicyChanges)
	})
	sweeping := h.sweepRealization(ctx)
	loops.Wait()
	writes.Wait()
	after, afterErr := h.reconcileStats(ctx, "pod-bandwidth")
	reconcilesErr = errors.Join(reconcilesErr, afterErr)
	res = ChurnResult{Duration: time.Since(start), PodsCreated: counts.PodsCreated.Load(),
		PodsDeleted: counts.PodsDeleted.Load(), PolicyChanges: counts.PolicyChanges.Load(), Failed: counts.Failed.Load()}
	if reconcilesErr != nil {
		h.logf("kovs-controller's reconcile metrics: %v", reconcilesErr)
	} else {
		res.Reconciles = after.Sub(reconciles)
	}
	h.realization.sweep(time.Now(), h.model.hosts)
	err := waitUntil(ctx, h.cfg.RealizationDeadline+5*time.Second, 500*time.Millisecond, "the churn's policy changes to be realized", func() error {
		if n := h.realization.pendingCount(); n > 0 {
			return fmt.Errorf("%d changes pending", n)
		}
		return nil
	})
	sweeping()
	// The split is read once the last changes are realized, so that their batches and
	// realizations, likely the slowest, are in it as they are in the harness's own split.
	splitAfter, splitAfterErr := h.controllerSplit(ctx)
	splitErr = errors.Join(splitErr, splitAfterErr)
	if splitErr == nil {
		res.ControllerSplit, splitErr = splitAfter.Sub(split)
	}
	if splitErr != nil {
		h.logf("kovs-controller's policy split metrics: %v", splitErr)
	}
	if dump, err := h.controllerReceipts(ctx); err != nil {
		h.logf("kovs-controller's receipts: %v", err)
	} else {
		res.KovsClock = splitAtReceipts(h.realization.finishedResults(), dump)
	}
	res.PolicySuperseded = h.realization.supersededCount()
	res.PolicySplit = h.realization.splitResults()
	res.PolicyLatency, res.PolicyLost, res.PolicyNoNode = h.realization.results()
	res.AllocationAfterCreate = h.alloc.afterCreateResults()
	res.Delivery, res.OnNode = h.alloc.splitResults()
	res.Allocation, res.AllocationPending, res.DeletedBeforeAllocation = h.alloc.results()
	res.Traffic = h.agentTraffic(before)
	return res, err
}

// sweepRealization sweeps the tracker every second until the returned stop is called.
func (h *Harness) sweepRealization(ctx context.Context) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(time.Second)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case now := <-t.C:
				h.realization.sweep(now, h.model.hosts)
			}
		}
	}()
	return func() { cancel(); <-done }
}

// policyQueue keeps the churn's live policies, oldest first.
type policyQueue struct {
	mu   sync.Mutex
	live []churnPolicy
}

type churnPolicy struct {
	name string
	sel  selector
}

// next is the next policy change: a creation (of a policy named name) while fewer than
// livePolicies exist, else the deletion of the oldest.
func (q *policyQueue) next(name string, pick func() selector) (string, selector, bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if len(q.live) >= livePolicies {
		p := q.live[0]
		q.live = q.live[1:]
		return p.name, p.sel, false
	}
	p := churnPolicy{name: name, sel: pick()}
	q.live = append(q.live, p)
	return p.name, p.sel, true
}

// trafficByNode reads every agent's counters.
func (h *Harness) trafficByNode() map[string]AgentTraffic {
	out := map[string]AgentTraffic{}
	for _, a := range h.sortedAgents() {
		out[a.node] = AgentTraffic{Node: a.node, Traffic: a.traffic(), WireBytes: a.wireBytes.Load()}
	}
	return out
}

// agentTraffic is every agent's traffic since before, with its share's size: the span
// the traffic is set against.
func (h *Harness) agentTraffic(before map[string]AgentTraffic) []AgentTraffic {
	var out []AgentTraffic
	for _, a := range h.sortedAgents() {
		share, _ := a.Share()
		b := before[a.node]
		out = append(out, AgentTraffic{Node: a.node, Traffic: a.traffic().Sub(b.Traffic), WireBytes: a.wireBytes.Load() - b.WireBytes,
			Pods: len(share.Pods), Rules: len(share.Rules)})
	}
	return out
}
