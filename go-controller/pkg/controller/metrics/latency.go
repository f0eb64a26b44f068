package metrics

import (
	"context"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/kovs-net/kovs/go-controller/pkg/policy"
	"github.com/kovs-net/kovs/go-controller/pkg/policy/stream"
)

// maxPendingPerNode bounds what is remembered of a node whose agent never reports.
const maxPendingPerNode = 1024

// RealizationLatency measures NetworkPolicy realization as the controller sees it: for
// every generation of a node's share sent on the node's stream, the time until the node's
// agent reports that generation (or a newer one) realized.
type RealizationLatency struct {
	hist prometheus.Histogram
	now  func() time.Time

	mu   sync.Mutex
	sent map[string][]sentGeneration // by node, oldest first
}

type sentGeneration struct {
	generation uint64
	at         time.Time
}

// NewRealizationLatency registers kovs_controller_policy_realization_seconds on reg.
func NewRealizationLatency(reg prometheus.Registerer) (*RealizationLatency, error) {
	l := &RealizationLatency{now: time.Now, sent: map[string][]sentGeneration{},
		hist: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "kovs_controller_policy_realization_seconds",
			Help:    "Time from a node's NetworkPolicy share generation leaving the controller to the node's agent reporting it realized.",
			Buckets: prometheus.ExponentialBuckets(0.005, 2, 14)})}
	if err := reg.Register(l.hist); err != nil {
		return nil, err
	}
	return l, nil
}

// sentAt records that a node was sent a generation.
func (l *RealizationLatency) sentAt(node string, generation uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	pending := append(l.sent[node], sentGeneration{generation, l.now()})
	if len(pending) > maxPendingPerNode {
		pending = pending[len(pending)-maxPendingPerNode:]
	}
	l.sent[node] = pending
}

// Realized observes every pending generation of the node the report covers.
func (l *RealizationLatency) realized(node string, generation uint64) {
	now := l.now()
	l.mu.Lock()
	pending := l.sent[node]
	kept := pending[:0]
	var done []time.Duration
	for _, s := range pending {
		if s.generation <= generation {
			done = append(done, now.Sub(s.at))
		} else {
			kept = append(kept, s)
		}
	}
	l.sent[node] = kept
	l.mu.Unlock()
	for _, d := range done {
		l.hist.Observe(d.Seconds())
	}
}

// Source returns src recording every generation it hands out.
func (l *RealizationLatency) Source(src stream.Source) stream.Source { return timedSource{src, l} }

// Reports returns r observing every report before passing it on.
func (l *RealizationLatency) Reports(r stream.Reports) stream.Reports { return timedReports{r, l} }

type timedReports struct {
	next stream.Reports
	l    *RealizationLatency
}

func (t timedReports) Realized(node string, generation uint64) {
	t.l.realized(node, generation)
	t.next.Realized(node, generation)
}

type timedSource struct {
	src stream.Source
	l   *RealizationLatency
}

func (t timedSource) Watch(ctx context.Context, node string) (policy.NodeShare, <-chan policy.Delta, func(), error) {
	share, deltas, cancel, err := t.src.Watch(ctx, node)
	if err != nil {
		return share, deltas, cancel, err
	}
	t.l.sentAt(node, share.Generation)
	out := make(chan policy.Delta)
	done := make(chan struct{})
	var once sync.Once
	go func() {
		defer close(out)
		for d := range deltas {
			select {
			case out <- d:
				t.l.sentAt(node, d.Generation)
			case <-done:
				return
			}
		}
	}()
	return share, out, func() { once.Do(func() { close(done); cancel() }) }, nil
}
