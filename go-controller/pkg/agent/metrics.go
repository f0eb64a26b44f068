package agent

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are kovs-agent's Prometheus metrics, registered on the registry the agent is
// given (Config.Registry). A nil *Metrics records nothing.
type Metrics struct {
	podSetup      *prometheus.HistogramVec
	cniRequests   *prometheus.CounterVec
	bundles       prometheus.Histogram
	bundleErrors  prometheus.Counter
	policyRealize prometheus.Histogram
	fullResyncs   *prometheus.CounterVec
	fullResyncDur prometheus.Histogram
	resyncChecks  *prometheus.CounterVec
	state         *stateCollector
	addresses     *addressCollector
	audit         *auditCollector
}

// latencyBuckets span 1 ms to about 30 s.
var latencyBuckets = prometheus.ExponentialBuckets(0.001, 2.5, 12)

// NewMetrics registers the agent's metrics on reg.
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{
		podSetup: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "kovs_agent_pod_network_setup_seconds",
			Help:    "Time from a CNI ADD reaching the agent to its answer (addresses allocated, port attached, flows and policy installed), by result.",
			Buckets: latencyBuckets}, []string{"result"}),
		cniRequests: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "kovs_agent_cni_requests_total",
			Help: "CNI requests served, by CNI verb (ADD, DEL, CHECK, GC, STATUS) and result (success or error)."},
			[]string{"verb", "result"}),
		bundles: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "kovs_agent_openflow_bundle_seconds",
			Help: "Time to apply one OpenFlow bundle to br-int (successful or not).", Buckets: latencyBuckets}),
		bundleErrors: prometheus.NewCounter(prometheus.CounterOpts{Name: "kovs_agent_openflow_bundle_errors_total",
			Help: "OpenFlow bundles br-int refused or that could not be sent."}),
		policyRealize: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "kovs_agent_policy_realization_seconds",
			Help:    "Time from receiving a NetworkPolicy snapshot or delta from kovs-controller to its flows installed on br-int.",
			Buckets: latencyBuckets}),
		fullResyncs: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "kovs_agent_flow_full_resyncs_total",
			Help: "Full flow resyncs (diff against the switch's own dump), by result."}, []string{"result"}),
		fullResyncDur: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "kovs_agent_flow_full_resync_seconds",
			Help: "Duration of a full flow resync (dump, diff and bundle).", Buckets: latencyBuckets}),
		resyncChecks: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "kovs_agent_flow_resync_checks_total",
			Help: "Flow resyncs between full ones (a count of the switch's flows against what the agent installed), by result: clean, drift (a full resync followed) or error."},
			[]string{"result"}),
		state:     &stateCollector{},
		addresses: &addressCollector{},
		audit:     &auditCollector{},
	}
	for _, c := range []prometheus.Collector{m.podSetup, m.cniRequests, m.bundles, m.bundleErrors, m.policyRealize,
		m.fullResyncs, m.fullResyncDur, m.resyncChecks, m.state, m.addresses, m.audit} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

func resultOf(err error) string {
	if err == nil {
		return "success"
	}
	return "error"
}

// bundleApplied records one bundle sent to br-int.
func (m *Metrics) bundleApplied(took time.Duration, err error) {
	if m == nil {
		return
	}
	m.bundles.Observe(took.Seconds())
	if err != nil {
		m.bundleErrors.Inc()
	}
}

// synced records the end of a flow sync.
func (m *Metrics) synced(full bool, took time.Duration, err error) {
	if m == nil || !full {
		return
	}
	m.fullResyncs.WithLabelValues(resultOf(err)).Inc()
	m.fullResyncDur.Observe(took.Seconds())
}

func (m *Metrics) cniRequest(verb string, err error) {
	if m == nil {
		return
	}
	m.cniRequests.WithLabelValues(verb, resultOf(err)).Inc()
}

func (m *Metrics) podSetupDone(took time.Duration, err error) {
	if m == nil {
		return
	}
	m.podSetup.WithLabelValues(resultOf(err)).Observe(took.Seconds())
}

func (m *Metrics) policyRealized(took time.Duration) {
	if m == nil {
		return
	}
	m.policyRealize.Observe(took.Seconds())
}

// Results of a resync check (kovs_agent_flow_resync_checks_total).
const (
	checkClean = "clean"
	checkDrift = "drift"
	checkError = "error"
)

// checked records one resync check's result.
func (m *Metrics) checked(result string) {
	if m == nil {
		return
	}
	m.resyncChecks.WithLabelValues(result).Inc()
}
