package reconcile

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

func TestMetricsCountReconcilesByControllerAndResult(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	var calls atomic.Int32
	rec := Func(func(_ context.Context, key string) error {
		calls.Add(1)
		if key == "bad" {
			return errors.New("no")
		}
		return nil
	})
	c := New(Options{Name: "things", Workers: 1, MaxRetries: 2, BaseDelay: time.Millisecond, MaxDelay: time.Millisecond, Metrics: m}, rec)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { _ = c.Run(ctx) }()
	c.Enqueue("a")
	c.Enqueue("b")
	c.Enqueue("bad")
	deadline := time.Now().Add(5 * time.Second)
	for calls.Load() < 5 && time.Now().Before(deadline) { // a, b, bad and its 2 retries
		time.Sleep(5 * time.Millisecond)
	}
	time.Sleep(20 * time.Millisecond)
	if got := histogramCount(t, reg, "kovs_reconcile_duration_seconds", map[string]string{"controller": "things", "result": "success"}); got != 2 {
		t.Errorf("successful reconciles = %d, want 2", got)
	}
	if got := histogramCount(t, reg, "kovs_reconcile_duration_seconds", map[string]string{"controller": "things", "result": "error"}); got != 3 {
		t.Errorf("failed reconciles = %d, want 3 (first try and 2 retries)", got)
	}
	if got := testutil.ToFloat64(m.retries.WithLabelValues("things")); got != 2 {
		t.Errorf("retries = %v, want 2", got)
	}
	if got := testutil.ToFloat64(m.depth.WithLabelValues("things")); got != 0 {
		t.Errorf("queue depth = %v after draining, want 0", got)
	}
	if got := testutil.ToFloat64(m.adds.WithLabelValues("things")); got < 3 {
		t.Errorf("queue adds = %v, want at least 3", got)
	}
}

func TestQueueDepthFollowsWaitingKeys(t *testing.T) {
	m, err := NewMetrics(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	c := New(Options{Name: "idle", Metrics: m}, Func(func(context.Context, string) error { return nil }))
	c.Enqueue("a")
	c.Enqueue("b")
	c.Enqueue("a") // deduplicated
	if got := testutil.ToFloat64(m.depth.WithLabelValues("idle")); got != 2 {
		t.Fatalf("queue depth = %v, want 2 (no worker runs)", got)
	}
}

func TestWithoutMetricsNothingIsRecorded(t *testing.T) {
	c := New(Options{Name: "plain"}, Func(func(context.Context, string) error { return nil }))
	c.Enqueue("a") // must not panic on the nil *Metrics
	if c.Len() != 1 {
		t.Fatalf("Len = %d", c.Len())
	}
}

func histogramCount(t *testing.T, g prometheus.Gatherer, name string, labels map[string]string) uint64 {
	t.Helper()
	families, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
	next:
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if v, ok := labels[l.GetName()]; ok && v != l.GetValue() {
					continue next
				}
			}
			return m.GetHistogram().GetSampleCount()
		}
	}
	return 0
}

func TestStuckNamesALongReconcile(t *testing.T) {
	m, err := NewMetrics(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	release := make(chan struct{})
	started := make(chan struct{})
	rec := Func(func(context.Context, string) error { close(started); <-release; return nil })
	c := New(Options{Name: "slow", Workers: 1, Metrics: m}, rec)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { _ = c.Run(ctx) }()
	c.Enqueue("k")
	<-started
	if err := m.Stuck(time.Now(), time.Minute); err != nil {
		t.Fatalf("stuck right away: %v", err)
	}
	if err := m.Stuck(time.Now().Add(2*time.Minute), time.Minute); err == nil {
		t.Fatal("a reconcile running for 2 minutes is not reported stuck")
	}
	close(release)
	deadline := time.Now().Add(5 * time.Second)
	for m.Stuck(time.Now().Add(2*time.Minute), time.Minute) != nil && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if err := m.Stuck(time.Now().Add(2*time.Minute), time.Minute); err != nil {
		t.Fatalf("still stuck after the reconcile returned: %v", err)
	}
}
