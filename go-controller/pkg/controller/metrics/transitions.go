package metrics

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// PolicyTransitions measures the transition gate (package transition): how long
// relaxations waited for the restrictions before them to be realized on every node, and
// how many nodes were held for not realizing one in time.
type PolicyTransitions struct {
	wait prometheus.Histogram
	held prometheus.Counter
}

// NewPolicyTransitions registers kovs_controller_policy_transition_wait_seconds and
// kovs_controller_policy_transition_held_nodes_total on reg.
func NewPolicyTransitions(reg prometheus.Registerer) (*PolicyTransitions, error) {
	t := &PolicyTransitions{
		wait: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "kovs_controller_policy_transition_wait_seconds",
			Help:    "How long NetworkPolicy relaxations waited for the restrictions sent before them to be realized on every node: per batch of relaxations sent together, the longest wait among them.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 16)}),
		held: prometheus.NewCounter(prometheus.CounterOpts{Name: "kovs_controller_policy_transition_held_nodes_total",
			Help: "Nodes that did not realize a NetworkPolicy restriction within --policy-transition-timeout and were held (no relaxation until they report)."}),
	}
	for _, c := range []prometheus.Collector{t.wait, t.held} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return t, nil
}

// Waited records one batch of relaxations' wait (transition.Options.Waited).
func (t *PolicyTransitions) Waited(d time.Duration) { t.wait.Observe(d.Seconds()) }

// Held counts held nodes (transition.Options.Held).
func (t *PolicyTransitions) Held(nodes []string) { t.held.Add(float64(len(nodes))) }
