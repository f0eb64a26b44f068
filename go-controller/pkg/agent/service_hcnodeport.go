package agent

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"sync"

	log "github.com/sirupsen/logrus"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/kovs-net/kovs/go-controller/pkg/serving"
)

// healthCheck is what a Service's health check node port answers on this node: kube-proxy
// serves one for every LoadBalancer Service with externalTrafficPolicy Local
// (spec.healthCheckNodePort), so that a cloud load balancer sends external traffic only
// to the nodes that have an endpoint of it.
type healthCheck struct {
	port uint16
	// local counts this node's ready endpoints per family (0: IPv4, 1: IPv6), each
	// address once whatever its ports (kube-proxy's LocalReadyEndpoints).
	local [2]int
}

// healthCheckOf is svc's health check on node, or false if it has none.
func healthCheckOf(svc *corev1.Service, list []*discoveryv1.EndpointSlice, node string) (healthCheck, bool) {
	if svc.Spec.Type != corev1.ServiceTypeLoadBalancer ||
		svc.Spec.ExternalTrafficPolicy != corev1.ServiceExternalTrafficPolicyLocal ||
		svc.Spec.HealthCheckNodePort <= 0 || svc.Spec.HealthCheckNodePort > 65535 {
		return healthCheck{}, false
	}
	hc := healthCheck{port: uint16(svc.Spec.HealthCheckNodePort)}
	for family, ipv6 := range []bool{false, true} {
		seen := map[netip.Addr]bool{}
		for _, sp := range svc.Spec.Ports {
			for _, e := range endpointsOf(list, sp, ipv6, node) {
				// ready, not the terminating fallback: a node whose endpoints all
				// terminate fails its health check, so load balancers drain it.
				if e.local && e.ready {
					seen[e.addr.Addr()] = true
				}
			}
		}
		hc.local[family] = len(seen)
	}
	return hc, true
}

// healthCheckServer serves the health check node ports of the node's Services
// (kube-proxy's ServiceHealthServer): on every address of the node, one port per Service.
type healthCheckServer struct {
	ctx context.Context
	// healthy says whether the node's Service rules are in sync (the proxy health URL's
	// semantics); nil: always.
	healthy func() bool
	listen  func(ctx context.Context, port uint16) (net.Listener, error)

	mu       sync.RWMutex
	services map[string]*healthCheckInstance // by Service key
}

type healthCheckInstance struct {
	healthCheck
	srv *http.Server
}

func newHealthCheckServer(ctx context.Context, healthy func() bool) *healthCheckServer {
	return &healthCheckServer{ctx: ctx, healthy: healthy, listen: listenAllAddresses, services: map[string]*healthCheckInstance{}}
}

// listenAllAddresses listens on port of every address of the node, both families when it
// has them (kube-proxy's default, without --nodeport-addresses).
func listenAllAddresses(ctx context.Context, port uint16) (net.Listener, error) {
	return (&net.ListenConfig{}).Listen(ctx, "tcp", net.JoinHostPort("", strconv.Itoa(int(port))))
}

// sync makes want (Service key -> its health check) the served set: a Service gone or
// whose port changed is closed, a new one opened, the others get their new counts. A port
// that cannot be opened (taken by another process) is logged and tried again at the next
// sync, as kube-proxy does.
func (s *healthCheckServer) sync(want map[string]healthCheck) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for key, inst := range s.services {
		if hc, ok := want[key]; !ok || hc.port != inst.port {
			log.WithField("service", key).WithField("port", inst.port).Info("closing health check node port")
			_ = inst.srv.Close()
			delete(s.services, key)
		}
	}
	for key, hc := range want {
		if inst := s.services[key]; inst != nil {
			inst.local = hc.local
			continue
		}
		ln, err := s.listen(s.ctx, hc.port)
		if err != nil {
			log.WithError(err).WithField("service", key).Errorf("health check node port %d: cannot listen (tried again at the next sync)", hc.port)
			continue
		}
		srv := serving.OpsTimeouts().Server(s.handler(key))
		serving.ShutdownWhenDone(s.ctx, srv)
		s.services[key] = &healthCheckInstance{healthCheck: hc, srv: srv}
		log.WithField("service", key).WithField("address", ln.Addr().String()).Info("serving health check node port")
		go func() {
			if err := srv.Serve(serving.Limit(ln, serving.OpsLimits(), log.WithField("component", "health check node port"))); err != nil && !errors.Is(err, http.ErrServerClosed) {
				log.WithError(err).WithField("service", key).Error("health check node port stopped")
			}
		}()
	}
}

// handler answers as kube-proxy's hcHandler does, whatever the path: 200 when the node
// has a ready endpoint of the Service (of the family the request came in on) and its
// Service rules are in sync, else 503; the count in X-Load-Balancing-Endpoint-Weight and
// in the JSON body.
func (s *healthCheckServer) handler(key string) http.Handler {
	ns, name, _ := cache.SplitMetaNamespaceKey(key)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.mu.RLock()
		inst, ok := s.services[key]
		var count int
		if ok {
			count = inst.local[requestFamily(r)]
		}
		s.mu.RUnlock()
		if !ok {
			return // closed while this request came in (kube-proxy answers nothing either)
		}
		healthy := s.healthy == nil || s.healthy()
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("X-Content-Type-Options", "nosniff")
		w.Header().Set("X-Load-Balancing-Endpoint-Weight", strconv.Itoa(count))
		if count != 0 && healthy {
			w.WriteHeader(http.StatusOK)
		} else {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
		// kube-proxy's body, byte for byte.
		_, _ = fmt.Fprintf(w, "{\n\t\"service\": {\n\t\t\"namespace\": %q,\n\t\t\"name\": %q\n\t},\n\t\"localEndpoints\": %d,\n\t\"serviceProxyHealthy\": %v\n}", ns, name, count, healthy)
	})
}

// requestFamily is 1 if the request came in on an IPv6 address of the node, else 0.
func requestFamily(r *http.Request) int {
	if a, ok := r.Context().Value(http.LocalAddrContextKey).(net.Addr); ok {
		if ap, err := netip.ParseAddrPort(a.String()); err == nil && ap.Addr().Unmap().Is6() {
			return 1
		}
	}
	return 0
}
