package reconcile

import (
	"fmt"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/util/workqueue"
)

// Metrics instrument every Controller built with them (Options.Metrics), each under its
// Options.Name in the "controller" label: queue depth, adds, wait and retries (fed by the
// work queue itself) and the duration and outcome of every Reconcile.
type Metrics struct {
	depth      *prometheus.GaugeVec
	adds       *prometheus.CounterVec
	wait       *prometheus.HistogramVec
	retries    *prometheus.CounterVec
	unfinished *prometheus.GaugeVec
	longest    *prometheus.GaugeVec
	duration   *prometheus.HistogramVec

	mu       sync.Mutex
	running  map[uint64]inFlight // Reconcile calls in progress
	nextCall uint64
}

// inFlight is one Reconcile call in progress.
type inFlight struct {
	controller, key string
	since           time.Time
}

// NewMetrics registers the reconcile metrics on reg.
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	byController := []string{"controller"}
	m := &Metrics{
		running: map[uint64]inFlight{},
		depth: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "kovs_reconcile_queue_depth",
			Help: "Keys waiting in the controller's work queue."}, byController),
		adds: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "kovs_reconcile_queue_adds_total",
			Help: "Keys added to the controller's work queue."}, byController),
		wait: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "kovs_reconcile_queue_wait_seconds",
			Help: "Time a key waits in the work queue before a worker takes it.", Buckets: latencyBuckets}, byController),
		retries: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "kovs_reconcile_retries_total",
			Help: "Keys requeued after a failed reconcile."}, byController),
		unfinished: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "kovs_reconcile_unfinished_work_seconds",
			Help: "Seconds of work in progress that no reconcile finished yet (large: a stuck worker)."}, byController),
		longest: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "kovs_reconcile_longest_running_seconds",
			Help: "How long the longest reconcile in progress has been running."}, byController),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "kovs_reconcile_duration_seconds",
			Help: "Duration of one Reconcile call, by result (success or error).", Buckets: latencyBuckets},
			[]string{"controller", "result"}),
	}
	for _, c := range []prometheus.Collector{m.depth, m.adds, m.wait, m.retries, m.unfinished, m.longest, m.duration} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// latencyBuckets span 1 ms to about 30 s.
var latencyBuckets = prometheus.ExponentialBuckets(0.001, 2.5, 12)

// begin records the start of a Reconcile call of the named controller; done records its
// end and outcome.
func (m *Metrics) begin(name, key string) (done func(error)) {
	if m == nil {
		return func(error) {}
	}
	start := time.Now()
	m.mu.Lock()
	m.nextCall++
	id := m.nextCall
	m.running[id] = inFlight{controller: name, key: key, since: start}
	m.mu.Unlock()
	return func(err error) {
		m.mu.Lock()
		delete(m.running, id)
		m.mu.Unlock()
		m.duration.WithLabelValues(name, resultOf(err)).Observe(time.Since(start).Seconds())
	}
}

// Stuck returns an error naming a Reconcile call that has been running for longer than
// limit (a wedged worker), nil when there is none.
func (m *Metrics) Stuck(now time.Time, limit time.Duration) error {
	if m == nil {
		return nil
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, r := range m.running {
		if d := now.Sub(r.since); d > limit {
			return fmt.Errorf("controller %s: reconcile of %q running for %s", r.controller, r.key, d.Round(time.Second))
		}
	}
	return nil
}

func resultOf(err error) string {
	if err == nil {
		return "success"
	}
	return "error"
}

// provider is the work queue's view of the metrics, or nil without metrics.
func (m *Metrics) provider() workqueue.MetricsProvider {
	if m == nil {
		return nil
	}
	return queueMetrics{m}
}

// queueMetrics feeds the work queue's own instrumentation into Metrics.
type queueMetrics struct{ m *Metrics }

func (q queueMetrics) NewDepthMetric(name string) workqueue.GaugeMetric {
	g := q.m.depth.WithLabelValues(name)
	g.Set(0) // a new queue under a reused name (a new term as leader) starts empty
	return g
}

func (q queueMetrics) NewAddsMetric(name string) workqueue.CounterMetric {
	return q.m.adds.WithLabelValues(name)
}

func (q queueMetrics) NewLatencyMetric(name string) workqueue.HistogramMetric {
	return q.m.wait.WithLabelValues(name)
}

// NewWorkDurationMetric is not fed: Metrics.observe records every Reconcile with its
// result instead.
func (q queueMetrics) NewWorkDurationMetric(string) workqueue.HistogramMetric { return noop{} }

func (q queueMetrics) NewUnfinishedWorkSecondsMetric(name string) workqueue.SettableGaugeMetric {
	return q.m.unfinished.WithLabelValues(name)
}

func (q queueMetrics) NewLongestRunningProcessorSecondsMetric(name string) workqueue.SettableGaugeMetric {
	return q.m.longest.WithLabelValues(name)
}

func (q queueMetrics) NewRetriesMetric(name string) workqueue.CounterMetric {
	return q.m.retries.WithLabelValues(name)
}

type noop struct{}

func (noop) Observe(float64) {}
