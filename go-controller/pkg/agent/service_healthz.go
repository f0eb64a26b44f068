package agent

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"sync"
	"time"

	log "github.com/sirupsen/logrus"
	corev1 "k8s.io/api/core/v1"

	"github.com/kovs-net/kovs/go-controller/pkg/serving"
)

// DefaultProxyHealthTimeout is how long a Service or EndpointSlice change may wait to be
// installed (flows, groups and host rules) before the proxy health URL says unhealthy:
// kube-proxy's default (--healthz-bind-address's server, 60 s).
const DefaultProxyHealthTimeout = 60 * time.Second

// ToBeDeletedTaint marks a node the cluster autoscaler is about to delete; kube-proxy's
// /healthz then fails so that load balancers drain the node first.
const ToBeDeletedTaint = "ToBeDeletedByClusterAutoscaler"

// proxyHealth is kube-proxy's health model (its pkg/proxy/healthcheck) for the kovs
// Service proxy: healthy unless a change of Services or EndpointSlices has waited longer
// than timeout to be in the switch. A change waits from the informer event that brought
// it until the flow sync that installed the generation holding it.
type proxyHealth struct {
	timeout   time.Duration
	now       func() time.Time
	installed func() uint64 // the generation the switch holds

	mu          sync.Mutex
	queuedSince time.Time     // the oldest change the proxy has not yet handed to the state
	handed      []pendingSync // changes handed to the state, oldest first, not yet installed
	lastUpdated time.Time     // when the last pending change was installed
}

type pendingSync struct {
	since time.Time
	gen   uint64
}

func newProxyHealth(timeout time.Duration, installed func() uint64) *proxyHealth {
	return &proxyHealth{timeout: timeout, now: time.Now, installed: installed}
}

// queued notes a change that came in (an informer event).
func (h *proxyHealth) queued() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.queuedSince.IsZero() {
		h.queuedSince = h.now()
	}
}

// take is called as the proxy takes the queued changes: it returns when the oldest of them
// came, for handedTo.
func (h *proxyHealth) take() time.Time {
	h.mu.Lock()
	defer h.mu.Unlock()
	since := h.queuedSince
	h.queuedSince = time.Time{}
	return since
}

// handedTo notes that the changes taken at since are in state generation gen.
func (h *proxyHealth) handedTo(since time.Time, gen uint64) {
	if since.IsZero() {
		return
	}
	h.mu.Lock()
	h.handed = append(h.handed, pendingSync{since, gen})
	h.mu.Unlock()
	h.synced(h.installed()) // a change that altered no flow is in the switch already
}

// synced is the flow syncer's OnSynced hook: generation gen is in the switch.
func (h *proxyHealth) synced(gen uint64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := 0
	for n < len(h.handed) && h.handed[n].gen <= gen {
		n++
	}
	if n > 0 {
		h.handed = h.handed[n:]
		h.lastUpdated = h.now()
	}
}

// healthy reports whether no change has waited longer than the timeout, and when the
// rules were last known in sync (now, if healthy: kube-proxy's compatible meaning).
func (h *proxyHealth) healthy() (bool, time.Time, time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	now := h.now()
	oldest := h.queuedSince
	if len(h.handed) > 0 {
		oldest = h.handed[0].since
	}
	if !oldest.IsZero() && now.Sub(oldest) >= h.timeout {
		return false, h.lastUpdated, now
	}
	return true, now, now
}

// nodeEligible is false for a node being deleted or tainted for deletion by the cluster
// autoscaler, as kube-proxy decides (a node not known yet is eligible).
func nodeEligible(node *corev1.Node) bool {
	if node == nil {
		return true
	}
	if node.DeletionTimestamp != nil {
		return false
	}
	for _, t := range node.Spec.Taints {
		if t.Key == ToBeDeletedTaint {
			return false
		}
	}
	return true
}

// proxyHealthHandler serves kube-proxy's health URLs: /healthz (the Service rules are in
// sync and the node is eligible for traffic) and /livez (the rules alone); 200 or 503
// with kube-proxy's JSON body. node returns the agent's Node (nil: not known).
func proxyHealthHandler(h *proxyHealth, node func() *corev1.Node) http.Handler {
	mux := http.NewServeMux()
	reply := func(w http.ResponseWriter, withNode bool) {
		ok, last, now := h.healthy()
		body := map[string]any{"lastUpdated": last, "currentTime": now}
		if withNode {
			eligible := nodeEligible(node())
			ok = ok && eligible
			body["nodeEligible"] = eligible
		}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("X-Content-Type-Options", "nosniff")
		if ok {
			w.WriteHeader(http.StatusOK)
		} else {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
		_ = json.NewEncoder(w).Encode(body)
	}
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { reply(w, true) })
	mux.HandleFunc("/livez", func(w http.ResponseWriter, _ *http.Request) { reply(w, false) })
	return mux
}

// ProxyMode is what the agent answers on kube-proxy's /proxyMode URL: the Service proxy
// that programs the node (kube-proxy answers iptables, ipvs or nftables).
const ProxyMode = "kovs"

// proxyModeHandler serves kube-proxy's /proxyMode (on its metrics port, 10249).
func proxyModeHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/proxyMode", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.Header().Set("X-Content-Type-Options", "nosniff")
		_, _ = w.Write([]byte(ProxyMode))
	})
	return mux
}

// proxyURLRetry is how long the agent waits before listening again on one of kube-proxy's
// addresses after it failed (kube-proxy's 5 s).
const proxyURLRetry = 5 * time.Second

// serveProxyURLs serves handler (what: the URLs, for the log) on addr until ctx ends. The
// address is often taken by a kube-proxy that still runs on the node: the agent says so
// and tries again, without stopping the Service proxy, as kube-proxy does when its own
// port is taken.
func serveProxyURLs(ctx context.Context, addr, what string, handler http.Handler) {
	srv := serving.OpsTimeouts().Server(handler)
	serving.ShutdownWhenDone(ctx, srv)
	go func() {
		logger := log.WithField("address", addr)
		for {
			ln, err := (&net.ListenConfig{}).Listen(ctx, "tcp", addr)
			if err == nil {
				logger.Info("serving kube-proxy's " + what)
				err = srv.Serve(serving.Limit(ln, serving.OpsLimits(), log.WithField("component", "kube-proxy URLs")))
				if errors.Is(err, http.ErrServerClosed) {
					return
				}
			}
			logger.WithError(err).Errorf("kube-proxy's %s (is kube-proxy still running on the node?); trying again in %s", what, proxyURLRetry)
			select {
			case <-ctx.Done():
				return
			case <-time.After(proxyURLRetry):
			}
		}
	}()
}
