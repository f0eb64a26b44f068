package harness

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"
)

// topRequests is how many of a phase's most frequent requests the report names.
const topRequests = 6

// minSLOSamples is the fewest requests of a resource and verb whose p99 the report holds
// against the SLO: with fewer, one slow request is the p99.
const minSLOSamples = 100

// writeP99 is the estimated p99 of every mutating request in m and whether it is within
// the SLO; "no writes" without any.
func writeP99(m APIServerMetrics) string {
	w, err := m.Writes()
	if err != nil {
		return "not read: " + err.Error()
	}
	if w.Count == 0 {
		return "no writes"
	}
	p99 := w.Quantile(0.99)
	verdict := "within"
	if p99 > writeSLO {
		verdict = "**above**"
	}
	return fmt.Sprintf("p99 ~%s (n=%d), %s its %s SLO", roundEstimate(p99), w.Count, verdict, writeSLO)
}

// quantileText is h's q-quantile estimate, or "<= <first bound>" when it falls in the
// first bucket, where interpolating from zero would invent a value; "0" when that bound is
// 0 (priority and fairness's wait histogram starts with le="0": no wait at all).
func quantileText(h Histogram, q float64) string {
	if h.Count > 0 && len(h.Upper) > 0 && float64(h.Counts[0]) >= q*float64(h.Count) {
		if h.Upper[0] == 0 {
			return "0"
		}
		return "<= " + time.Duration(h.Upper[0]*float64(time.Second)).String()
	}
	return "~" + roundEstimate(h.Quantile(q)).String()
}

// apiserverSection is kube-apiserver's load per phase from its own /metrics: every
// client's requests, the write latency against the SLO, priority and fairness's queues.
func (r *Result) apiserverSection(p func(string, ...any)) {
	if len(r.APIServer) == 0 {
		return
	}
	p("## kube-apiserver's load per phase (its own /metrics)")
	p("")
	p("Read from kube-apiserver's `/metrics` at every phase boundary, every client's requests: `apiserver_request_total` (by resource and verb, the %d most frequent named), `apiserver_request_duration_seconds` of the mutating verbs (%s) against SIG Scalability's write SLO (p99 <= 1 s per resource and verb; bucket estimates), and priority and fairness's queue wait `apiserver_flowcontrol_request_wait_duration_seconds` and rejections per priority level.",
		topRequests, strings.Join(mutatingVerbs, ", "))
	p("")
	p("| phase | requests/s | most frequent (count) | writes, all | slowest write (n >= %d) |", minSLOSamples)
	p("|---|---|---|---|---|")
	for _, ph := range r.APIServer {
		m := ph.Metrics
		var top []string
		for _, k := range m.TopRequests(topRequests) {
			top = append(top, fmt.Sprintf("%s %.0f", k, m.Requests[k]))
		}
		worst := "none"
		if k, p99, ok := m.WorstWrite(minSLOSamples); ok {
			worst = fmt.Sprintf("%s p99 ~%s (n=%d)", k, roundEstimate(p99), m.Duration[k].Count)
		}
		p("| %s | %.1f | %s | %s | %s |", ph.Name, m.TotalRequests()/max(ph.Seconds, 1e-9), strings.Join(top, ", "), writeP99(m), worst)
	}
	p("")
	p("")
	p("Priority and fairness (kube-apiserver's defaults): the hollow kubelets impersonate `system:nodes` (levels `node-high` and `system`), kovs-controller is a ServiceAccount (`workload-high`, its leader Lease `leader-election`); the harness's own workload writes and reads use the admin's `system:masters` identity, which is exempt and queues nowhere.")
	p("")
	p("| phase | priority level | requests queued or run | wait p50 / p99 (estimates) | rejected |")
	p("|---|---|---|---|---|")
	for _, ph := range r.APIServer {
		m := ph.Metrics
		levels := slices.Sorted(maps.Keys(m.Wait))
		for l := range m.Rejected {
			if _, ok := m.Wait[l]; !ok {
				levels = append(levels, l)
			}
		}
		for _, l := range levels {
			w := m.Wait[l]
			p("| %s | %s | %d | %s / %s | %.0f |", ph.Name, l, w.Count, quantileText(w, 0.5), quantileText(w, 0.99), m.Rejected[l])
		}
	}
}
