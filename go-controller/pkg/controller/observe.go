package controller

import (
	"net/http"
	"time"

	"github.com/kovs-net/kovs/go-controller/pkg/controller/metrics"
	"github.com/kovs-net/kovs/go-controller/pkg/controller/networkpolicy"
	"github.com/kovs-net/kovs/go-controller/pkg/controller/transition"
	"github.com/kovs-net/kovs/go-controller/pkg/policy/stream"
	"github.com/kovs-net/kovs/go-controller/pkg/reconcile"
)

// observer keeps the controller's metrics and health up to date; either may be nil.
type observer struct {
	metrics *metrics.Set
	health  *metrics.Health
}

// wedgedAfter is how long one Reconcile may run before the controller is reported not
// alive (a worker stuck on a call without a deadline).
const wedgedAfter = 5 * time.Minute

// live sets the liveness check: the leader election watchdog's, if any, and no
// Reconcile wedged.
func (o observer) live(watchdog func(*http.Request) error) {
	if o.health == nil {
		return
	}
	o.health.SetLive(func(r *http.Request) error {
		if watchdog != nil {
			if err := watchdog(r); err != nil {
				return err
			}
		}
		return o.reconcile().Stuck(time.Now(), wedgedAfter)
	})
}

func (o observer) electing() {
	if o.health != nil {
		o.health.Electing()
	}
}

func (o observer) leading(leading bool) {
	if o.health != nil {
		o.health.Leading(leading)
	}
	if o.metrics != nil {
		o.metrics.SetLeading(leading)
	}
}

func (o observer) synced() {
	if o.health != nil {
		o.health.Synced()
	}
}

// addresses attaches the allocator's usage until the returned function is called.
func (o observer) addresses(src metrics.AddressSource) func() {
	if o.metrics == nil {
		return func() {}
	}
	o.metrics.Addresses.Set(src)
	return o.metrics.Addresses.Clear
}

// realization attaches the realization summary until the returned function is called.
func (o observer) realization(src metrics.Summarizer) func() {
	if o.metrics == nil {
		return func() {}
	}
	o.metrics.Realization.Set(src)
	return o.metrics.Realization.Clear
}

// policyBatch is what the policy compiler reports its batches to (nil: no metrics).
func (o observer) policyBatch() func(networkpolicy.Batch) {
	if o.metrics == nil {
		return nil
	}
	return o.metrics.Batches.Observe
}

// transitions fills the transition gate's metrics hooks (none without metrics).
func (o observer) transitions(opts transition.Options) transition.Options {
	if o.metrics != nil {
		opts.Waited, opts.Held = o.metrics.Transitions.Waited, o.metrics.Transitions.Held
	}
	return opts
}

func (o observer) reconcile() *reconcile.Metrics {
	if o.metrics == nil {
		return nil
	}
	return o.metrics.Reconcile
}

// stream wraps the policy stream's source and reports to measure realization latency.
func (o observer) stream(src stream.Source, reports stream.Reports) (stream.Source, stream.Reports) {
	if o.metrics == nil {
		return src, reports
	}
	return o.metrics.Latency.Source(src), o.metrics.Latency.Reports(reports)
}

// authentication counts how the stream's authenticator decided each agent token.
func (o observer) authentication() func(how string) {
	if o.metrics == nil {
		return nil
	}
	return o.metrics.Authentications
}
