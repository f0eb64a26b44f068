package harness

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"time"

	dto "github.com/prometheus/client_model/go"
)

// Histogram is one Prometheus histogram as /metrics reads it at one moment, or what was
// observed between two reads (Sub).
type Histogram struct {
	Upper  []float64 // the buckets' upper bounds in seconds, ascending, +Inf left out
	Counts []uint64  // cumulative count at each bound
	Count  uint64    // every observation, those above the last bound included
	Sum    float64
}

// histogramOf finds the unlabelled histogram name among families.
func histogramOf(families map[string]*dto.MetricFamily, name string) (Histogram, error) {
	f, ok := families[name]
	if !ok || len(f.GetMetric()) != 1 || f.GetMetric()[0].GetHistogram() == nil {
		return Histogram{}, fmt.Errorf("kovs-controller's /metrics has no histogram %s", name)
	}
	return histogramOfSeries(f.GetMetric()[0].GetHistogram()), nil
}

// histogramOfSeries is one series of a histogram family.
func histogramOfSeries(m *dto.Histogram) Histogram {
	h := Histogram{Count: m.GetSampleCount(), Sum: m.GetSampleSum()}
	for _, b := range m.GetBucket() {
		if math.IsInf(b.GetUpperBound(), 1) {
			continue
		}
		h.Upper = append(h.Upper, b.GetUpperBound())
		h.Counts = append(h.Counts, b.GetCumulativeCount())
	}
	return h
}

// Sub is what was observed between an earlier read and h. It is an error when the two
// reads have other buckets or any count went down: kovs-controller restarted (or another
// replica took the lead) between them, and the difference would mean nothing.
func (h Histogram) Sub(earlier Histogram) (Histogram, error) {
	if !slices.Equal(h.Upper, earlier.Upper) {
		return Histogram{}, fmt.Errorf("the buckets changed between the reads (%v, then %v)", earlier.Upper, h.Upper)
	}
	if h.Count < earlier.Count {
		return Histogram{}, fmt.Errorf("the count went down from %d to %d: kovs-controller restarted between the reads", earlier.Count, h.Count)
	}
	d := Histogram{Upper: h.Upper, Counts: make([]uint64, len(h.Counts)), Count: h.Count - earlier.Count, Sum: h.Sum - earlier.Sum}
	for i := range h.Counts {
		if h.Counts[i] < earlier.Counts[i] {
			return Histogram{}, fmt.Errorf("bucket le=%g went down from %d to %d: kovs-controller restarted between the reads",
				h.Upper[i], earlier.Counts[i], h.Counts[i])
		}
		d.Counts[i] = h.Counts[i] - earlier.Counts[i]
	}
	return d, nil
}

// Add merges two series of one histogram (the same buckets); the zero Histogram adds
// nothing.
func (h Histogram) Add(o Histogram) (Histogram, error) {
	if h.Upper == nil && h.Count == 0 {
		return o, nil
	}
	if !slices.Equal(h.Upper, o.Upper) {
		return h, fmt.Errorf("cannot add histograms of other buckets (%v and %v)", h.Upper, o.Upper)
	}
	s := Histogram{Upper: h.Upper, Counts: slices.Clone(h.Counts), Count: h.Count + o.Count, Sum: h.Sum + o.Sum}
	for i := range s.Counts {
		s.Counts[i] += o.Counts[i]
	}
	return s, nil
}

// Quantile estimates the q-quantile (0 < q <= 1) as Prometheus's histogram_quantile does:
// linearly inside the bucket the rank falls in, from 0 for the first bucket; a rank above
// the last bound gives the last bound. 0 without observations.
func (h Histogram) Quantile(q float64) time.Duration {
	if h.Count == 0 || len(h.Upper) == 0 {
		return 0
	}
	rank := q * float64(h.Count)
	lower, below := 0.0, uint64(0)
	for i, upper := range h.Upper {
		if float64(h.Counts[i]) >= rank {
			in := h.Counts[i] - below
			frac := 1.0
			if in > 0 {
				frac = (rank - float64(below)) / float64(in)
			}
			return time.Duration((lower + (upper-lower)*frac) * float64(time.Second))
		}
		lower, below = upper, h.Counts[i]
	}
	return time.Duration(h.Upper[len(h.Upper)-1] * float64(time.Second))
}

// roundEstimate rounds a histogram's estimate to what its buckets can tell: 100 µs below
// 10 ms, 1 ms above.
func roundEstimate(d time.Duration) time.Duration {
	if d < 10*time.Millisecond {
		return d.Round(100 * time.Microsecond)
	}
	return d.Round(time.Millisecond)
}

// Summary is the estimated p50 and p99, the mean and the count.
func (h Histogram) Summary() string {
	if h.Count == 0 {
		return "no samples"
	}
	r := roundEstimate
	mean := time.Duration(h.Sum / float64(h.Count) * float64(time.Second))
	return fmt.Sprintf("p50 ~%s, p99 ~%s, mean %s (n=%d)", r(h.Quantile(0.5)), r(h.Quantile(0.99)), r(mean), h.Count)
}

// ControllerSplit is kovs-controller's own histograms of a NetworkPolicy change's way
// through it (docs/networkpolicy-stream.md), over one phase.
type ControllerSplit struct {
	// BatchWait is the wait of a batch's oldest change, Batch the batch, per batch;
	// SentToRealized a node's new share generation handed to its stream to the agent's
	// report of it, per node and generation; TransitionWait the wait of a transition's
	// relaxations for its restrictions, per transition that had both (the transition
	// gate, docs/networkpolicy-stream.md).
	BatchWait, Batch, SentToRealized, TransitionWait Histogram
}

// Sub is what was observed between an earlier read and s (see Histogram.Sub).
func (s ControllerSplit) Sub(earlier ControllerSplit) (ControllerSplit, error) {
	var d ControllerSplit
	var errs [4]error
	d.BatchWait, errs[0] = s.BatchWait.Sub(earlier.BatchWait)
	d.Batch, errs[1] = s.Batch.Sub(earlier.Batch)
	d.SentToRealized, errs[2] = s.SentToRealized.Sub(earlier.SentToRealized)
	d.TransitionWait, errs[3] = s.TransitionWait.Sub(earlier.TransitionWait)
	return d, errors.Join(errs[:]...)
}

// controllerSplit reads the histograms of ControllerSplit from kovs-controller's /metrics.
func (h *Harness) controllerSplit(ctx context.Context) (ControllerSplit, error) {
	var s ControllerSplit
	families, err := h.controllerMetrics(ctx)
	if err != nil {
		return s, err
	}
	for _, m := range []struct {
		name string
		to   *Histogram
	}{
		{"kovs_controller_policy_batch_wait_seconds", &s.BatchWait},
		{"kovs_controller_policy_batch_seconds", &s.Batch},
		{"kovs_controller_policy_realization_seconds", &s.SentToRealized},
		{"kovs_controller_policy_transition_wait_seconds", &s.TransitionWait},
	} {
		if *m.to, err = histogramOf(families, m.name); err != nil {
			return s, err
		}
	}
	return s, nil
}
