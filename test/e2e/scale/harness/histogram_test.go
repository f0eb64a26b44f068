package harness

import (
	"testing"
	"time"
)

func TestHistogramQuantileAndSub(t *testing.T) {
	// Buckets 10 ms, 20 ms, 40 ms: 10 observations at or below 10 ms, 10 in (10, 20],
	// none in (20, 40], 2 above.
	h := Histogram{Upper: []float64{0.01, 0.02, 0.04}, Counts: []uint64{10, 20, 20}, Count: 22, Sum: 1}
	for _, tc := range []struct {
		q    float64
		want time.Duration
	}{
		{0.25, 5500 * time.Microsecond}, // rank 5.5 of 10 in [0, 10 ms]
		{0.5, 11 * time.Millisecond},    // rank 11: the first of (10, 20]
		{0.99, 40 * time.Millisecond},   // rank 21.78: above the last bound
	} {
		if got := h.Quantile(tc.q); got.Round(time.Microsecond) != tc.want {
			t.Errorf("Quantile(%v) = %s, want %s", tc.q, got, tc.want)
		}
	}
	earlier := Histogram{Upper: h.Upper, Counts: []uint64{10, 10, 10}, Count: 10, Sum: 0.05}
	d, err := h.Sub(earlier)
	if err != nil {
		t.Fatal(err)
	}
	if d.Count != 12 || d.Counts[0] != 0 || d.Counts[1] != 10 || d.Counts[2] != 10 {
		t.Errorf("Sub = %+v", d)
	}
	if got := d.Quantile(0.5); got.Round(time.Microsecond) != 16*time.Millisecond { // rank 6 of (10, 20]
		t.Errorf("Sub's median = %s, want 16ms", got)
	}
	// kovs-controller restarted between the reads: its counts start again from zero.
	if _, err := earlier.Sub(h); err == nil {
		t.Error("Sub of a later read with lower counts gave no error")
	}
	if _, err := h.Sub(Histogram{Upper: []float64{0.01, 0.05, 0.1}, Counts: []uint64{1, 2, 3}, Count: 3}); err == nil {
		t.Error("Sub across other buckets gave no error")
	}
	if (Histogram{}).Quantile(0.5) != 0 || (Histogram{}).Summary() != "no samples" {
		t.Error("an empty histogram has a quantile")
	}
}
