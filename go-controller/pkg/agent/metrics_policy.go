package agent

import (
	"sync"
	"time"

	"github.com/kovs-net/kovs/go-controller/pkg/policy"
)

// timedPolicy is the NodePolicy as the policy feed sees it, timing every snapshot and
// delta from its arrival to the flow sync that installed it.
type timedPolicy struct {
	*NodePolicy // Realized and RealizedChanged pass through
	metrics     *Metrics
	now         func() time.Time

	mu      sync.Mutex
	pending []arrival // oldest first
}

// arrival is a version of the share waiting for its flows: when it arrived and the
// NodeState generation that holds it.
type arrival struct {
	at    time.Time
	state uint64
}

var _ policy.Sink = (*timedPolicy)(nil)

// policySink returns p timed, or p itself without metrics; flows is the syncer that
// installs its versions.
func (m *Metrics) policySink(p *NodePolicy, flows *FlowSyncer) policy.Sink {
	if m == nil {
		return p
	}
	t := &timedPolicy{NodePolicy: p, metrics: m, now: time.Now}
	flows.OnSynced(t.installed)
	return t
}

func (t *timedPolicy) Snapshot(share policy.NodeShare) error {
	at := t.now()
	if err := t.NodePolicy.Snapshot(share); err != nil {
		return err
	}
	t.arrived(at)
	return nil
}

func (t *timedPolicy) Delta(d policy.Delta) error {
	at := t.now()
	if err := t.NodePolicy.Delta(d); err != nil {
		return err
	}
	t.arrived(at)
	return nil
}

// arrived notes the version just handed to the NodeState.
func (t *timedPolicy) arrived(at time.Time) {
	t.NodePolicy.mu.Lock()
	var state uint64
	if n := len(t.NodePolicy.waiting); n > 0 {
		state = t.NodePolicy.waiting[n-1].state
	}
	t.NodePolicy.mu.Unlock()
	if state == 0 { // already installed and reported realized
		t.metrics.policyRealized(t.now().Sub(at))
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.pending = append(t.pending, arrival{at: at, state: state})
}

// installed is told the NodeState generation of every successful flow sync.
func (t *timedPolicy) installed(gen uint64) {
	now := t.now()
	t.mu.Lock()
	var done []time.Duration
	for len(t.pending) > 0 && t.pending[0].state <= gen {
		done = append(done, now.Sub(t.pending[0].at))
		t.pending = t.pending[1:]
	}
	t.mu.Unlock()
	for _, d := range done {
		t.metrics.policyRealized(d)
	}
}
