// Package metrics exposes kovs-controller's state to Prometheus (how far every
// NetworkPolicy is enforced, how full the address plan is, the work queues of the
// reconcilers, policy realization latency) and serves /metrics, /healthz and /readyz.
package metrics

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	log "github.com/sirupsen/logrus"

	"github.com/kovs-net/kovs/go-controller/pkg/controller/realization"
	"github.com/kovs-net/kovs/go-controller/pkg/reconcile"
	"github.com/kovs-net/kovs/go-controller/pkg/serving"
)

var (
	realizedDesc = prometheus.NewDesc("kovs_networkpolicy_realized_nodes",
		"Nodes that enforce the NetworkPolicy's current generation.", []string{"namespace", "name"}, nil)
	concernedDesc = prometheus.NewDesc("kovs_networkpolicy_concerned_nodes",
		"Nodes with pods the NetworkPolicy selects.", []string{"namespace", "name"}, nil)
	policiesDesc = prometheus.NewDesc("kovs_networkpolicies",
		"NetworkPolicies by realization state (complete: enforced on every node it concerns).", []string{"state"}, nil)
)

// Summarizer is where realization numbers come from (*realization.Controller).
type Summarizer interface{ Summary() realization.Summary }

// RealizationCollector turns the realization summary into metrics at every scrape.
type RealizationCollector struct{ Source Summarizer }

// Describe implements prometheus.Collector.
func (c RealizationCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- realizedDesc
	ch <- concernedDesc
	ch <- policiesDesc
}

// Collect implements prometheus.Collector.
func (c RealizationCollector) Collect(ch chan<- prometheus.Metric) {
	sum := c.Source.Summary()
	for key, st := range sum.Policies {
		ns, name, _ := strings.Cut(key, "/")
		ch <- prometheus.MustNewConstMetric(realizedDesc, prometheus.GaugeValue, float64(st.Realized), ns, name)
		ch <- prometheus.MustNewConstMetric(concernedDesc, prometheus.GaugeValue, float64(st.Concerned), ns, name)
	}
	ch <- prometheus.MustNewConstMetric(policiesDesc, prometheus.GaugeValue, float64(sum.Complete), "complete")
	ch <- prometheus.MustNewConstMetric(policiesDesc, prometheus.GaugeValue, float64(sum.Incomplete), "incomplete")
}

// Set is kovs-controller's metrics on its registry. The parts that run only while this
// replica leads attach their sources when they start and detach them when they stop.
type Set struct {
	Reconcile   *reconcile.Metrics
	Latency     *RealizationLatency
	Batches     *PolicyBatches
	Transitions *PolicyTransitions
	Addresses   *Slot[AddressSource]
	Realization *Slot[Summarizer]
	leader      prometheus.Gauge
	authn       *prometheus.CounterVec
}

// NewSet registers kovs-controller's metrics on reg.
func NewSet(reg prometheus.Registerer) (*Set, error) {
	rec, err := reconcile.NewMetrics(reg)
	if err != nil {
		return nil, err
	}
	lat, err := NewRealizationLatency(reg)
	if err != nil {
		return nil, err
	}
	batches, err := NewPolicyBatches(reg)
	if err != nil {
		return nil, err
	}
	transitions, err := NewPolicyTransitions(reg)
	if err != nil {
		return nil, err
	}
	s := &Set{Reconcile: rec, Latency: lat, Batches: batches, Transitions: transitions, Addresses: &Slot[AddressSource]{}, Realization: &Slot[Summarizer]{},
		leader: prometheus.NewGauge(prometheus.GaugeOpts{Name: "kovs_controller_leader",
			Help: "1 while this replica leads (runs the controllers), 0 on standby."}),
		authn: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "kovs_controller_agent_authentications_total",
			Help: "Agent tokens presented to the policy stream, by how they were decided: local (verified by the controller), review (asked of kube-apiserver), refused (by the controller)."},
			[]string{"how"})}
	for _, c := range []prometheus.Collector{s.leader, s.authn, AddressCollector{Source: s.Addresses},
		RealizationCollector{Source: slotSummary{s.Realization}}} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return s, nil
}

// SetLeading records whether this replica leads.
func (s *Set) SetLeading(leading bool) {
	v := 0.0
	if leading {
		v = 1
	}
	s.leader.Set(v)
}

// Authentications counts one agent token decided how (local, review or refused).
func (s *Set) Authentications(how string) {
	s.authn.WithLabelValues(how).Inc()
}

// slotSummary is an empty summary while no realization controller is attached.
type slotSummary struct{ slot *Slot[Summarizer] }

func (s slotSummary) Summary() realization.Summary {
	if src, ok := s.slot.Get(); ok {
		return src.Summary()
	}
	return realization.Summary{}
}

// Serve serves /metrics (what gatherer gathers), /healthz and /readyz (from health) on
// addr until ctx ends. Health answers loopback clients only (kubelet probes 127.0.0.1:
// the controller runs on the host network); /metrics answers whoever reaches addr, which
// is loopback unless the operator chose to expose it (docs/configuration.md). Every
// connection is bounded in time and number (package serving). debug adds handlers by path,
// loopback only (the receipts of --debug-receipts).
func Serve(ctx context.Context, addr string, gatherer prometheus.Gatherer, health *Health, debug map[string]http.Handler) error {
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(gatherer, promhttp.HandlerOpts{}))
	mux.Handle("/healthz", serving.LoopbackOnly(http.HandlerFunc(health.serveLive)))
	mux.Handle("/readyz", serving.LoopbackOnly(http.HandlerFunc(health.serveReady)))
	for path, h := range debug {
		mux.Handle(path, serving.LoopbackOnly(h))
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("metrics listener: %w", err)
	}
	if !serving.IsLoopbackAddress(addr) {
		log.WithField("address", addr).Warn("metrics served beyond loopback, unauthenticated: keep the port closed to pods and untrusted networks")
	}
	srv := serving.OpsTimeouts().Server(mux)
	serving.ShutdownWhenDone(ctx, srv)
	if err := srv.Serve(serving.Limit(ln, serving.OpsLimits(), log.WithField("component", "metrics"))); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
