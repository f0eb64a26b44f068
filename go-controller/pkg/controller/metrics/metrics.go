// Package metrics exposes kovs-controller's state to Prometheus: how far every
// NetworkPolicy is enforced (read from the realization status at scrape time).
package metrics

import (
	"context"
	"errors"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/kovs-net/kovs/go-controller/pkg/controller/realization"
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

// Serve serves /metrics (the collectors plus Go runtime and process metrics) and
// /healthz on addr until ctx ends.
func Serve(ctx context.Context, addr string, collectors ...prometheus.Collector) error {
	reg := prometheus.NewRegistry()
	reg.MustRegister(prometheus.NewGoCollector(), prometheus.NewProcessCollector(prometheus.ProcessCollectorOpts{}))
	for _, c := range collectors {
		if err := reg.Register(c); err != nil {
			return err
		}
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok")) })
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		<-ctx.Done()
		shut, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(shut)
	}()
	if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
