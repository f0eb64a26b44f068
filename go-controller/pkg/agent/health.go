package agent

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/kovs-net/kovs/go-controller/pkg/nodestatus"
)

// syncHealth is what the flow syncer's loop last did, for liveness and readiness. It is
// guarded by the syncer's mutex.
type syncHealth struct {
	attempted  time.Time // the last sync, successful or not
	succeeded  time.Time // the last successful sync
	fullSynced time.Time // the last successful full sync
}

func (h *syncHealth) note(now time.Time, full bool, err error) {
	h.attempted = now
	if err != nil {
		return
	}
	h.succeeded = now
	if full {
		h.fullSynced = now
	}
}

// syncHealth returns a copy of the syncer's health record.
func (s *FlowSyncer) syncHealth() syncHealth {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.health
}

func check(name string, err error) nodestatus.Check {
	if err != nil {
		return nodestatus.Check{Name: name, Message: err.Error()}
	}
	return nodestatus.Check{Name: name, OK: true}
}

// agentHealth is what the health and status endpoints read: the agent's parts as Run
// creates them (the endpoints serve from the start, concurrently with Run) and the
// startup stages passed. Its zero value is an agent that has not started.
type agentHealth struct {
	syncer     atomic.Pointer[FlowSyncer]
	state      atomic.Pointer[NodeState]
	policy     atomic.Pointer[NodePolicy]
	programmed atomic.Bool // br-int has its ports and its first flows
	cniServing atomic.Bool

	mu sync.Mutex
	// ovsConnected reports whether the OVSDB connection is up (nil: not connected yet).
	ovsConnected func() bool
	// feedConnected reports whether the policy stream is connected (nil: not known).
	feedConnected func() bool
}

func (h *agentHealth) setOVS(store any) {
	connected := func() bool { return true }
	if c, ok := store.(interface{ Connected() bool }); ok {
		connected = c.Connected
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.ovsConnected = connected
}

// wedgedAfter is how long the flow syncer may go without attempting a sync before the
// agent is reported not alive: it attempts one at least every resync period.
func wedgedAfter(period time.Duration) time.Duration { return 3*period + 30*time.Second }

// liveness is nil while the agent's loops make progress.
func (a *Agent) liveness(now time.Time) error {
	syncer := a.health.syncer.Load()
	if syncer == nil || !a.health.programmed.Load() {
		return nil // still starting: readiness says how far
	}
	last := syncer.syncHealth().attempted
	if limit := wedgedAfter(a.cfg.ResyncPeriod); now.Sub(last) > limit {
		return fmt.Errorf("flow syncer wedged: no sync attempted for %s (at least one every %s expected)",
			now.Sub(last).Round(time.Second), a.cfg.ResyncPeriod)
	}
	return nil
}

// readinessChecks lists the conditions of a ready agent, in the order the agent meets them.
func (a *Agent) readinessChecks() []nodestatus.Check {
	checks := []nodestatus.Check{check("ovs", a.ovsCheck())}
	var programmed error
	if !a.health.programmed.Load() {
		programmed = fmt.Errorf("%s not programmed yet", a.cfg.Bridge)
	}
	checks = append(checks, check("bridge", programmed), check("flows", a.flowsCheck()))
	var cni error
	if !a.health.cniServing.Load() {
		cni = fmt.Errorf("CNI server not listening on %s yet", a.cfg.CNISocket)
	}
	checks = append(checks, check("cni-server", cni))
	if a.cfg.PolicyFeed != nil {
		checks = append(checks, check("policy-feed", a.policyFeedCheck()))
	}
	return checks
}

func (a *Agent) ovsCheck() error {
	a.health.mu.Lock()
	connected := a.health.ovsConnected
	a.health.mu.Unlock()
	if connected == nil {
		return fmt.Errorf("not connected to OVSDB %s yet", a.cfg.OVSDB)
	}
	if !connected() {
		return fmt.Errorf("OVSDB connection to %s lost", a.cfg.OVSDB)
	}
	return nil
}

// flowsCheck is nil when a full sync succeeded and the last sync did.
func (a *Agent) flowsCheck() error {
	syncer := a.health.syncer.Load()
	if syncer == nil {
		return fmt.Errorf("flow syncer not started")
	}
	if syncer.syncHealth().fullSynced.IsZero() {
		return fmt.Errorf("first full flow sync not done yet")
	}
	if _, err := syncer.Synced(); err != nil {
		return fmt.Errorf("last flow sync failed: %w", err)
	}
	return nil
}

func (a *Agent) policyFeedCheck() error {
	policy := a.health.policy.Load()
	if policy == nil {
		return fmt.Errorf("NetworkPolicy not set up yet")
	}
	if err := policy.ControllerError(); err != nil {
		return err
	}
	select {
	case <-policy.Received():
	default:
		return fmt.Errorf("no NetworkPolicy snapshot from kovs-controller yet")
	}
	a.health.mu.Lock()
	connected := a.health.feedConnected
	a.health.mu.Unlock()
	if connected != nil && !connected() {
		return fmt.Errorf("not connected to kovs-controller's policy stream (enforcing the last policy received)")
	}
	return nil
}

// ready is nil when every readiness check passes.
func ready(checks []nodestatus.Check) error {
	for _, c := range checks {
		if !c.OK {
			return fmt.Errorf("%s: %s", c.Name, c.Message)
		}
	}
	return nil
}

// attach makes the agent's parts visible to the health and status endpoints.
func (h *agentHealth) attach(state *NodeState, syncer *FlowSyncer, policy *NodePolicy) {
	h.state.Store(state)
	h.syncer.Store(syncer)
	if policy != nil {
		h.policy.Store(policy)
	}
}

// startOps builds the agent's metrics and starts serving them with the health and
// status endpoints, when configured.
func (a *Agent) startOps(ctx context.Context) error {
	a.health.mu.Lock()
	a.health.feedConnected = a.cfg.PolicyFeedConnected
	a.health.mu.Unlock()
	if a.cfg.Registry != nil {
		m, err := NewMetrics(a.cfg.Registry)
		if err != nil {
			return fmt.Errorf("agent metrics: %w", err)
		}
		m.watch(&a.health)
		a.metrics = m
	}
	if a.cfg.MetricsListen == "" {
		return nil
	}
	var gatherer prometheus.Gatherer
	if a.cfg.Registry != nil {
		gatherer = a.cfg.Registry
	}
	return a.serveOps(ctx, a.cfg.MetricsListen, gatherer)
}
