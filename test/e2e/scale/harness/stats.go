// Package harness is kovs's scale harness: thousands of simulated nodes against the real
// kube-apiserver, etcd and kovs-controller of a sandbox in scale mode (kovs-sandbox up
// --control-plane-only). Each simulated node has a hollow kubelet (its Node, its Lease,
// its pods' status) and a simulated agent, a real policy-stream client with its own TLS
// connection and node-bound token that applies its share in memory and reports
// realization. See docs/scale.md.
package harness

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"time"
)

// Durations is a sample of latencies.
type Durations []time.Duration

// Percentile returns the p-th percentile (0 < p <= 100) by the nearest-rank method: the
// smallest sample with at least p % of the samples at or below it; 0 for no samples.
func (d Durations) Percentile(p float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := slices.Clone(d)
	slices.Sort(s)
	return nearestRank(s, p)
}

// nearestRank is the p-th percentile (0 < p <= 100) of sorted by the nearest-rank
// method; 0 for no samples.
func nearestRank[T cmp.Ordered](sorted []T, p float64) T {
	if len(sorted) == 0 {
		var zero T
		return zero
	}
	rank := int(math.Ceil(p / 100 * float64(len(sorted))))
	return sorted[min(max(rank, 1), len(sorted))-1]
}

// Max is the largest sample (0 for none).
func (d Durations) Max() time.Duration {
	if len(d) == 0 {
		return 0
	}
	return slices.Max(d)
}

// Summary is "p50 12ms, p99 80ms, max 95ms (n=1000)".
func (d Durations) Summary() string {
	if len(d) == 0 {
		return "no samples"
	}
	r := func(x time.Duration) time.Duration { return x.Round(time.Millisecond) }
	return fmt.Sprintf("p50 %s, p99 %s, max %s (n=%d)", r(d.Percentile(50)), r(d.Percentile(99)), r(d.Max()), len(d))
}

// SummaryFine is Summary to the microsecond, for steps far shorter than a millisecond.
func (d Durations) SummaryFine() string {
	if len(d) == 0 {
		return "no samples"
	}
	r := func(x time.Duration) time.Duration { return x.Round(time.Microsecond) }
	return fmt.Sprintf("p50 %s, p99 %s, max %s (n=%d)", r(d.Percentile(50)), r(d.Percentile(99)), r(d.Max()), len(d))
}

// floorRatio is "1.02x at p50, 1.01x at p99": total's percentiles over floor's (the same
// pods' samples, floor a part of total).
func floorRatio(total, floor Durations) string {
	f50, f99 := floor.Percentile(50), floor.Percentile(99)
	if len(total) == 0 || f50 <= 0 || f99 <= 0 {
		return "no samples"
	}
	return fmt.Sprintf("%.3fx at p50, %.3fx at p99", float64(total.Percentile(50))/float64(f50), float64(total.Percentile(99))/float64(f99))
}

// Traffic is what one agent received while one change was being realized: delta messages
// and their encoded bytes.
type Traffic struct {
	Messages, Bytes int64
}

// Sub is t minus an earlier reading.
func (t Traffic) Sub(o Traffic) Traffic { return Traffic{t.Messages - o.Messages, t.Bytes - o.Bytes} }

// SpanSample is one agent's traffic for one isolated change, with its span: how many of
// the node's pods the change selects (0: the change does not concern the node).
type SpanSample struct {
	Span    int
	Traffic Traffic
}

// SpanRow aggregates the samples of one span.
type SpanRow struct {
	Span, Samples int
	// Messages and Bytes are per sample (per agent per change), averaged; MaxBytes the
	// largest; BytesPerSpan the average bytes per selected pod (0 for span 0).
	Messages, Bytes, BytesPerSpan float64
	MaxBytes                      int64
}

// SpanTable groups samples by span, in increasing span.
func SpanTable(samples []SpanSample) []SpanRow {
	rows := map[int]*SpanRow{}
	for _, s := range samples {
		r := rows[s.Span]
		if r == nil {
			r = &SpanRow{Span: s.Span}
			rows[s.Span] = r
		}
		r.Samples++
		r.Messages += float64(s.Traffic.Messages)
		r.Bytes += float64(s.Traffic.Bytes)
		r.MaxBytes = max(r.MaxBytes, s.Traffic.Bytes)
	}
	out := make([]SpanRow, 0, len(rows))
	for _, r := range rows {
		r.Messages /= float64(r.Samples)
		r.Bytes /= float64(r.Samples)
		if r.Span > 0 {
			r.BytesPerSpan = r.Bytes / float64(r.Span)
		}
		out = append(out, *r)
	}
	slices.SortFunc(out, func(a, b SpanRow) int { return cmp.Compare(a.Span, b.Span) })
	return out
}

// Unconcerned counts the samples of span 0 that received anything: agents sent traffic
// for a change that selects none of their pods.
func Unconcerned(samples []SpanSample) (withTraffic, total int) {
	for _, s := range samples {
		if s.Span == 0 {
			total++
			if s.Traffic.Messages > 0 || s.Traffic.Bytes > 0 {
				withTraffic++
			}
		}
	}
	return withTraffic, total
}
