package harness

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	dto "github.com/prometheus/client_model/go"
	"k8s.io/client-go/kubernetes"
)

// kube-apiserver's own account of its load, read from its /metrics at every phase
// boundary: what the run's requests cost it, by whom they were made aside (the audit log
// counts kovs-controller's alone).

// mutatingVerbs are the verbs of apiserver_request_total and
// apiserver_request_duration_seconds that write; SIG Scalability's API call latency SLO
// holds them to p99 <= 1 s per resource and verb.
var mutatingVerbs = []string{"POST", "PUT", "PATCH", "DELETE", "DELETECOLLECTION", "APPLY"}

// writeSLO is that SLO's bound.
const writeSLO = time.Second

// RequestKey is a resource (with its subresource, "nodes/status") and a verb.
type RequestKey struct{ Resource, Verb string }

func (k RequestKey) String() string { return strings.ToLower(k.Verb) + " " + k.Resource }

func (k RequestKey) mutating() bool { return slices.Contains(mutatingVerbs, k.Verb) }

// APIServerMetrics is kube-apiserver's /metrics at one moment, or what it counted between
// two reads (Sub).
type APIServerMetrics struct {
	// Requests is apiserver_request_total summed over codes, scopes and components.
	Requests map[RequestKey]float64
	// Duration is apiserver_request_duration_seconds per resource and verb (WATCH and
	// CONNECT, which last as long as the client wants, left out).
	Duration map[RequestKey]Histogram
	// Wait is apiserver_flowcontrol_request_wait_duration_seconds per priority level:
	// priority and fairness holding requests in its queues; Rejected its
	// apiserver_flowcontrol_rejected_requests_total per priority level.
	Wait     map[string]Histogram
	Rejected map[string]float64
}

// newAPIServerMetrics is an empty read, its maps made.
func newAPIServerMetrics() APIServerMetrics {
	return APIServerMetrics{Requests: map[RequestKey]float64{}, Duration: map[RequestKey]Histogram{},
		Wait: map[string]Histogram{}, Rejected: map[string]float64{}}
}

// parseAPIServerMetrics reads kube-apiserver's /metrics text.
func parseAPIServerMetrics(text []byte) (APIServerMetrics, error) {
	families, err := parseFamilies(text, "kube-apiserver")
	if err != nil {
		return APIServerMetrics{}, err
	}
	m := newAPIServerMetrics()
	for _, s := range families["apiserver_request_total"].GetMetric() {
		m.Requests[requestKey(s)] += s.GetCounter().GetValue()
	}
	var errs []error
	for _, s := range families["apiserver_request_duration_seconds"].GetMetric() {
		k := requestKey(s)
		if k.Verb == "WATCH" || k.Verb == "CONNECT" {
			continue
		}
		errs = append(errs, addHistogram(m.Duration, k, s))
	}
	for _, s := range families["apiserver_flowcontrol_request_wait_duration_seconds"].GetMetric() {
		errs = append(errs, addHistogram(m.Wait, label(s, "priority_level"), s))
	}
	for _, s := range families["apiserver_flowcontrol_rejected_requests_total"].GetMetric() {
		m.Rejected[label(s, "priority_level")] += s.GetCounter().GetValue()
	}
	if len(m.Requests) == 0 {
		errs = append(errs, errors.New("kube-apiserver's /metrics has no apiserver_request_total"))
	}
	return m, errors.Join(errs...)
}

func label(s *dto.Metric, name string) string {
	for _, l := range s.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

func requestKey(s *dto.Metric) RequestKey {
	r := label(s, "resource")
	if sub := label(s, "subresource"); sub != "" {
		r += "/" + sub
	}
	if r == "" {
		r = "(no resource)"
	}
	return RequestKey{Resource: r, Verb: label(s, "verb")}
}

// addHistogram adds the histogram series s into to[k].
func addHistogram[K comparable](to map[K]Histogram, k K, s *dto.Metric) error {
	h := histogramOfSeries(s.GetHistogram())
	old, ok := to[k]
	if !ok {
		to[k] = h
		return nil
	}
	sum, err := old.Add(h)
	to[k] = sum
	return err
}

// Sub is what kube-apiserver counted between an earlier read and m. A series absent from
// the earlier read (first seen since) counts from zero.
func (m APIServerMetrics) Sub(earlier APIServerMetrics) (APIServerMetrics, error) {
	d := newAPIServerMetrics()
	var errs []error
	for k, v := range m.Requests {
		if n := v - earlier.Requests[k]; n > 0 {
			d.Requests[k] = n
		} else if n < 0 {
			errs = append(errs, fmt.Errorf("%s went down from %.0f to %.0f: kube-apiserver restarted between the reads", k, earlier.Requests[k], v))
		}
	}
	for k, v := range m.Rejected {
		if n := v - earlier.Rejected[k]; n > 0 {
			d.Rejected[k] = n
		}
	}
	errs = append(errs, subHistograms(d.Duration, m.Duration, earlier.Duration), subHistograms(d.Wait, m.Wait, earlier.Wait))
	return d, errors.Join(errs...)
}

func subHistograms[K comparable](to, later, earlier map[K]Histogram) error {
	var errs []error
	for k, h := range later {
		e, ok := earlier[k]
		if !ok {
			to[k] = h
			continue
		}
		diff, err := h.Sub(e)
		if err != nil {
			errs = append(errs, fmt.Errorf("%v: %w", k, err))
			continue
		}
		if diff.Count > 0 {
			to[k] = diff
		}
	}
	return errors.Join(errs...)
}

// TopRequests are the n most frequent requests, most first (ties by name).
func (m APIServerMetrics) TopRequests(n int) []RequestKey {
	keys := make([]RequestKey, 0, len(m.Requests))
	for k := range m.Requests {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b RequestKey) int {
		return cmp.Or(cmp.Compare(m.Requests[b], m.Requests[a]), cmp.Compare(a.String(), b.String()))
	})
	return keys[:min(n, len(keys))]
}

// TotalRequests sums every request.
func (m APIServerMetrics) TotalRequests() float64 {
	var t float64
	for _, v := range m.Requests {
		t += v
	}
	return t
}

// Writes merges the duration histograms of every mutating request.
func (m APIServerMetrics) Writes() (Histogram, error) {
	var all Histogram
	var errs []error
	for k, h := range m.Duration {
		if !k.mutating() {
			continue
		}
		sum, err := all.Add(h)
		errs = append(errs, err)
		all = sum
	}
	return all, errors.Join(errs...)
}

// WorstWrite is the mutating resource and verb with the highest estimated p99 among those
// with at least minCount requests: the SLO is per resource and verb.
func (m APIServerMetrics) WorstWrite(minCount uint64) (RequestKey, time.Duration, bool) {
	var worst RequestKey
	var p99 time.Duration
	found := false
	for k, h := range m.Duration {
		if !k.mutating() || h.Count < minCount {
			continue
		}
		if q := h.Quantile(0.99); !found || q > p99 || (q == p99 && k.String() < worst.String()) {
			worst, p99, found = k, q, true
		}
	}
	return worst, p99, found
}

// APIServerPhase is what kube-apiserver counted during one phase of the run.
type APIServerPhase struct {
	Name    string
	Seconds float64
	Metrics APIServerMetrics
}

// apiserverMetrics reads kube-apiserver's /metrics with client (the admin's).
func apiserverMetrics(ctx context.Context, client kubernetes.Interface) (APIServerMetrics, error) {
	body, err := client.Discovery().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		return APIServerMetrics{}, fmt.Errorf("kube-apiserver's /metrics: %w", err)
	}
	return parseAPIServerMetrics(body)
}
