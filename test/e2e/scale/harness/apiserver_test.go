package harness

import (
	"fmt"
	"os"
	"strings"
	"testing"
	"time"
)

// The two files are kube-apiserver's /metrics text format (the label sets it writes,
// fewer buckets) read at two phase boundaries: between them, 300 pod creations (100 of
// them answered 429, 100 taking 1-2 s), 200 fast node status patches, two watches, and
// priority and fairness queueing 100 requests of level system and 107 of workload-low (7
// rejected).
func readAPIServerMetrics(t *testing.T, file string) APIServerMetrics {
	t.Helper()
	text, err := os.ReadFile("testdata/" + file)
	if err != nil {
		t.Fatal(err)
	}
	m, err := parseAPIServerMetrics(text)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func TestAPIServerMetricsPerPhase(t *testing.T) {
	before, after := readAPIServerMetrics(t, "apiserver-metrics-before.txt"), readAPIServerMetrics(t, "apiserver-metrics-after.txt")
	d, err := after.Sub(before)
	if err != nil {
		t.Fatal(err)
	}
	postPods, patchStatus := RequestKey{"pods", "POST"}, RequestKey{"nodes/status", "PATCH"}
	if got := d.Requests; got[postPods] != 300 || got[patchStatus] != 200 || got[RequestKey{"pods", "WATCH"}] != 2 || len(got) != 3 {
		t.Errorf("requests in the phase = %v, want post pods 300 (codes summed), patch nodes/status 200, watch pods 2, nothing else", got)
	}
	if top := d.TopRequests(2); len(top) != 2 || top[0] != postPods || top[1] != patchStatus {
		t.Errorf("top requests = %v, want post pods, then patch nodes/status", top)
	}
	if _, ok := d.Duration[RequestKey{"pods", "WATCH"}]; ok {
		t.Errorf("a watch's duration (as long as its client wants) is counted as a request's latency")
	}
	w, err := d.Writes()
	if err != nil {
		t.Fatal(err)
	}
	// 500 writes, 400 of them within 1 s, 100 in (1 s, 2 s]: the 495th is 95 % into it.
	if w.Count != 500 || w.Quantile(0.99) != 1950*time.Millisecond {
		t.Errorf("writes in the phase: n=%d p99 %s, want n=500 p99 1.95s", w.Count, w.Quantile(0.99))
	}
	if got := writeP99(d); !strings.Contains(got, "**above** its 1s SLO") {
		t.Errorf("writeP99 = %q, want it above the SLO", got)
	}
	if k, p99, ok := d.WorstWrite(100); !ok || k != postPods || p99 != 1970*time.Millisecond {
		t.Errorf("worst write = %v %s %v, want post pods at 1.97s", k, p99, ok)
	}
	sys, low := d.Wait["system"], d.Wait["workload-low"]
	if sys.Count != 100 || low.Count != 107 || d.Rejected["workload-low"] != 7 || len(d.Rejected) != 1 {
		t.Errorf("priority levels: system n=%d, workload-low n=%d, rejected %v; want 100, 107 (executed and not), workload-low 7",
			sys.Count, low.Count, d.Rejected)
	}
	if got := sys.Quantile(0.99); got != 24800*time.Microsecond {
		t.Errorf("system's wait p99 = %s, want 24.8ms", got)
	}
	var b strings.Builder
	r := &Result{APIServer: []APIServerPhase{{Name: "churn", Seconds: 10, Metrics: d}}}
	r.apiserverSection(func(f string, a ...any) { b.WriteString(fmt.Sprintf(f, a...) + "\n") })
	for _, want := range []string{"| churn | 50.2 | post pods 300, patch nodes/status 200, watch pods 2 | p99 ~1.95s (n=500), **above** its 1s SLO | post pods p99 ~1.97s (n=300) |",
		"| churn | system | 100 | ~15ms / ~25ms | 0 |", "| churn | workload-low | 107 | ~", "| 7 |"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("kube-apiserver's section lacks %q:\n%s", want, b.String())
		}
	}
	if _, err := before.Sub(after); err == nil {
		t.Errorf("counters that went down (kube-apiserver restarted) gave a difference")
	}
}

// TestQuantileTextInTheFirstBucket: a quantile that falls in the first bucket is given as
// at most its bound, not interpolated from zero; priority and fairness's histogram starts
// at le="0", where a quantile is no wait at all.
func TestQuantileTextInTheFirstBucket(t *testing.T) {
	for _, c := range []struct {
		h                Histogram
		wantP50, wantP99 string
	}{
		{Histogram{Upper: []float64{0.005, 0.025}, Counts: []uint64{98, 100}, Count: 100}, "<= 5ms", "~15ms"},
		{Histogram{Upper: []float64{0, 0.005}, Counts: []uint64{60, 100}, Count: 100}, "0", "~4.9ms"},
	} {
		if p50, p99 := quantileText(c.h, 0.5), quantileText(c.h, 0.99); p50 != c.wantP50 || p99 != c.wantP99 {
			t.Errorf("bounds %v counts %v: p50 %q, p99 %q; want %q, %q", c.h.Upper, c.h.Counts, p50, p99, c.wantP50, c.wantP99)
		}
	}
}
