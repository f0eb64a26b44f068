package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	log "github.com/sirupsen/logrus"

	"github.com/kovs-net/kovs/go-controller/pkg/nodestatus"
	"github.com/kovs-net/kovs/go-controller/pkg/serving"
)

// serveOps listens on the metrics address and serves, until ctx ends: /metrics (what
// gatherer gathers), /healthz (alive: the agent's loops make progress), /readyz (every
// readiness check passes, one line per check) and /status (nodestatus.Status as JSON). It
// returns once listening, or the error that prevented it. Only /metrics answers clients
// beyond loopback, and only when the operator binds the address beyond it (the default
// is 127.0.0.1: the agent runs on the host network, where every pod reaches the node's
// addresses); health and /status are for kubelet's probes and kovsctl, on the node.
// Every connection is bounded in time and number (package serving).
func (a *Agent) serveOps(ctx context.Context, addr string, gatherer prometheus.Gatherer) error {
	mux := http.NewServeMux()
	if gatherer != nil {
		mux.Handle("/metrics", promhttp.HandlerFor(gatherer, promhttp.HandlerOpts{}))
	}
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		if err := a.liveness(time.Now()); err != nil {
			http.Error(w, "unhealthy: "+err.Error(), http.StatusInternalServerError)
			return
		}
		_, _ = fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		checks := a.readinessChecks()
		status := http.StatusOK
		if ready(checks) != nil {
			status = http.StatusServiceUnavailable
		}
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.WriteHeader(status)
		for _, c := range checks {
			if c.OK {
				_, _ = fmt.Fprintf(w, "[+]%s ok\n", c.Name)
			} else {
				_, _ = fmt.Fprintf(w, "[-]%s failed: %s\n", c.Name, c.Message)
			}
		}
	})
	mux.HandleFunc(nodestatus.Path, func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(a.nodeStatus(time.Now()))
	})
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("metrics listener: %w", err)
	}
	if !serving.IsLoopbackAddress(addr) {
		log.WithField("address", addr).Warn("metrics served beyond loopback, unauthenticated: keep the port closed to pods and untrusted networks")
	}
	srv := serving.OpsTimeouts().Server(opsHandler(mux))
	serving.ShutdownWhenDone(ctx, srv)
	go func() {
		if err := srv.Serve(serving.Limit(ln, serving.OpsLimits(), log.WithField("component", "ops"))); !errors.Is(err, http.ErrServerClosed) {
			log.WithError(err).WithField("address", addr).Error("metrics and health server stopped")
		}
	}()
	log.WithField("address", ln.Addr().String()).Info("serving /metrics, /healthz, /readyz and /status")
	return nil
}

// opsHandler answers loopback clients with mux and others with /metrics only.
func opsHandler(mux *http.ServeMux) http.Handler {
	local := serving.LoopbackOnly(mux)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/metrics" {
			mux.ServeHTTP(w, r)
			return
		}
		local.ServeHTTP(w, r)
	})
}
