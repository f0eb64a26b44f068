package agent

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/kovs-net/kovs/go-controller/pkg/cni"
	"github.com/kovs-net/kovs/go-controller/pkg/pipeline"
)

func newTestMetrics(t *testing.T) (*Metrics, *prometheus.Registry) {
	t.Helper()
	reg := prometheus.NewRegistry()
	m, err := NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	return m, reg
}

// histogramCount is the number of observations of a histogram series.
func histogramCount(t *testing.T, g prometheus.Gatherer, name string, labels map[string]string) uint64 {
	t.Helper()
	families, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var n uint64
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
			n += m.GetHistogram().GetSampleCount()
		}
	}
	return n
}

func TestFlowSyncMetricsAndFlowsPerTable(t *testing.T) {
	m, reg := newTestMetrics(t)
	r := newPolicyRig(t, localPods()...)
	r.syncer.metrics = m
	var h agentHealth
	h.attach(r.state, r.syncer, nil)
	m.watch(&h)
	r.sync(t, true)
	if got := testutil.ToFloat64(m.fullResyncs.WithLabelValues("success")); got != 1 {
		t.Errorf("successful full resyncs = %v, want 1", got)
	}
	if got := histogramCount(t, reg, "kovs_agent_openflow_bundle_seconds", nil); got != 1 {
		t.Errorf("bundles observed = %d, want 1", got)
	}
	r.sync(t, false) // nothing changed: no bundle, not a full resync
	if got := histogramCount(t, reg, "kovs_agent_openflow_bundle_seconds", nil); got != 1 {
		t.Errorf("bundles observed after an empty sync = %d, want 1", got)
	}
	want := map[string]float64{}
	for _, e := range r.sw.Flows() {
		table, _ := pipeline.TableByID(uint8(e.Table))
		want[table.Name]++
	}
	total := 0.0
	for name, n := range want {
		got := testutil.ToFloat64(constGauge(t, reg, "kovs_agent_flows", "table", name))
		if got != n {
			t.Errorf("kovs_agent_flows{table=%q} = %v, the switch has %v", name, got, n)
		}
		total += got
	}
	if total == 0 || int(total) != len(r.sw.Flows()) {
		t.Errorf("flows per table add up to %v, the switch has %d", total, len(r.sw.Flows()))
	}
	if got := testutil.ToFloat64(constGauge(t, reg, "kovs_agent_pod_ports", "", "")); got != float64(len(localPods())) {
		t.Errorf("kovs_agent_pod_ports = %v, want %d", got, len(localPods()))
	}
}

// constGauge finds one series of a scraped gauge (label "" for a series without labels).
func constGauge(t *testing.T, g prometheus.Gatherer, name, label, value string) prometheus.Gauge {
	t.Helper()
	families, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			if label == "" && len(m.GetLabel()) == 0 {
				return fixedGauge(m.GetGauge().GetValue())
			}
			for _, l := range m.GetLabel() {
				if l.GetName() == label && l.GetValue() == value {
					return fixedGauge(m.GetGauge().GetValue())
				}
			}
		}
	}
	t.Fatalf("%s{%s=%q} not found", name, label, value)
	return nil
}

func fixedGauge(v float64) prometheus.Gauge {
	g := prometheus.NewGauge(prometheus.GaugeOpts{Name: "g", Help: "g"})
	g.Set(v)
	return g
}

func TestBundleErrorsAreCounted(t *testing.T) {
	m, _ := newTestMetrics(t)
	r := newPolicyRig(t, localPods()...)
	r.syncer.metrics = m
	r.sw.FailNextBundle(errors.New("refused"))
	r.syncer.sync(context.Background(), true)
	if got := testutil.ToFloat64(m.bundleErrors); got != 1 {
		t.Errorf("bundle errors = %v, want 1", got)
	}
	if got := testutil.ToFloat64(m.fullResyncs.WithLabelValues("error")); got != 1 {
		t.Errorf("failed full resyncs = %v, want 1", got)
	}
}

func TestPolicyRealizationLatencyFromArrivalToInstall(t *testing.T) {
	m, reg := newTestMetrics(t)
	r := newPolicyRig(t, localPods()...)
	r.syncer.OnSynced(r.sink.flowsInstalled)
	sink := m.policySink(r.sink, r.syncer).(*timedPolicy)
	now := time.Unix(1000, 0)
	sink.now = func() time.Time { return now }
	r.sync(t, true)
	if err := sink.Snapshot(startShare()); err != nil {
		t.Fatal(err)
	}
	if got := histogramCount(t, reg, "kovs_agent_policy_realization_seconds", nil); got != 0 {
		t.Fatalf("observed %d realizations before the snapshot's flows were installed", got)
	}
	now = now.Add(300 * time.Millisecond)
	r.sync(t, false)
	if got := histogramCount(t, reg, "kovs_agent_policy_realization_seconds", nil); got != 1 {
		t.Fatalf("realizations after the sync = %d, want 1", got)
	}
	if err := sink.Delta(deltas()[0]); err != nil {
		t.Fatal(err)
	}
	if err := sink.Delta(deltas()[1]); err != nil {
		t.Fatal(err)
	}
	now = now.Add(time.Second)
	r.sync(t, false)
	if got := histogramCount(t, reg, "kovs_agent_policy_realization_seconds", nil); got != 3 {
		t.Fatalf("realizations after two deltas installed in one sync = %d, want 3", got)
	}
	if err := sink.Delta(deltas()[0]); err == nil { // does not follow generation 6
		t.Fatal("an out-of-order delta was accepted")
	}
	if len(sink.pending) != 0 {
		t.Errorf("a refused delta is waiting to be timed: %v", sink.pending)
	}
	if got := sink.Realized(); got != 6 {
		t.Errorf("Realized through the timed sink = %d, want 6", got)
	}
}

// fakeCNI answers every request with err.
type fakeCNI struct {
	err     error
	advance func()
}

// fakeCNI's Add takes addTakes of the handler's clock (now) before it answers.
func (f *fakeCNI) Add(context.Context, cni.AddRequest) (*cni.PodNetworkConfig, error) {
	if f.advance != nil {
		f.advance()
	}
	if f.err != nil {
		return nil, f.err
	}
	return &cni.PodNetworkConfig{}, nil
}
func (f *fakeCNI) Detach(context.Context, cni.DetachRequest) error { return f.err }
func (f *fakeCNI) Check(context.Context, cni.AttachRequest) error  { return f.err }
func (f *fakeCNI) GC(context.Context, []cni.Attachment) error      { return f.err }
func (f *fakeCNI) Status(context.Context) error                    { return f.err }

func TestCNIRequestsAndPodSetupLatency(t *testing.T) {
	m, reg := newTestMetrics(t)
	now := time.Unix(1000, 0)
	h := m.cniHandler(&fakeCNI{advance: func() { now = now.Add(2 * time.Second) }}).(*measuredHandler)
	h.now = func() time.Time { return now }
	ctx := context.Background()
	pod := cni.PodRef{Namespace: "x", Name: "a", UID: "u1"}
	if _, err := h.Add(ctx, cni.AddRequest{Pod: pod}); err != nil {
		t.Fatal(err)
	}
	_ = h.Detach(ctx, cni.DetachRequest{})
	_ = h.Check(ctx, cni.AttachRequest{})
	_ = h.GC(ctx, nil)
	_ = h.Status(ctx)
	for verb, want := range map[string]float64{verbAdd: 1, verbDel: 1, verbCheck: 1, verbGC: 1, verbStatus: 1} {
		if got := testutil.ToFloat64(m.cniRequests.WithLabelValues(verb, "success")); got != want {
			t.Errorf("%s successes = %v, want %v", verb, got, want)
		}
	}
	if got := histogramCount(t, reg, "kovs_agent_pod_network_setup_seconds", map[string]string{"result": "success"}); got != 1 {
		t.Fatalf("setup latency samples = %d, want 1", got)
	}
	families, _ := reg.Gather()
	for _, f := range families {
		if f.GetName() == "kovs_agent_pod_network_setup_seconds" {
			if sum := f.GetMetric()[0].GetHistogram().GetSampleSum(); sum != 2 {
				t.Errorf("setup latency = %vs, want 2s (from the ADD's request to its answer)", sum)
			}
		}
	}

	// A failed ADD counts as an error.
	failing := m.cniHandler(&fakeCNI{err: errors.New("no address left")})
	if _, err := failing.Add(ctx, cni.AddRequest{Pod: cni.PodRef{Namespace: "x", Name: "b", UID: "u2"}}); err == nil {
		t.Fatal("want the handler's error")
	}
	if got := testutil.ToFloat64(m.cniRequests.WithLabelValues(verbAdd, "error")); got != 1 {
		t.Errorf("ADD errors = %v, want 1", got)
	}
}

func TestNilMetricsRecordNothing(t *testing.T) {
	var m *Metrics
	h := &fakeCNI{}
	if got := m.cniHandler(h); got != cni.Handler(h) {
		t.Errorf("nil metrics wrapped the CNI handler")
	}
	m.bundleApplied(time.Second, nil)
	m.synced(true, time.Second, errors.New("x"))
	m.policyRealized(time.Second)
	m.watch(&agentHealth{})
}
