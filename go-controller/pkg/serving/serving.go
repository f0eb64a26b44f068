// Package serving is what every kovs HTTP server shares: a bound on connections, overall
// and per client address, and handlers that answer loopback clients only. The servers set
// their timeouts (Timeouts) on every phase a client could stall.
package serving

import (
	"context"
	"net"
	"net/http"
	"net/netip"
	"sync"
	"time"

	"github.com/sirupsen/logrus"
)

// Timeouts are the http.Server timeouts of the servers whose handlers answer at once (the
// health, status and metrics servers): a client that sends nothing, reads nothing or
// keeps an idle connection is dropped.
type Timeouts struct {
	ReadHeader, Read, Write, Idle time.Duration
}

// OpsTimeouts are the health and metrics servers' timeouts.
func OpsTimeouts() Timeouts {
	return Timeouts{ReadHeader: 5 * time.Second, Read: 10 * time.Second, Write: 30 * time.Second, Idle: time.Minute}
}

// Server returns an http.Server of h with the timeouts t and a 64 KiB header bound.
func (t Timeouts) Server(h http.Handler) *http.Server {
	return &http.Server{Handler: h, ReadHeaderTimeout: t.ReadHeader, ReadTimeout: t.Read, WriteTimeout: t.Write,
		IdleTimeout: t.Idle, MaxHeaderBytes: 64 << 10}
}

// Limits bound a listener's connections: Total at once, PerHost from one client address.
type Limits struct {
	Total, PerHost int
}

// ShutdownWhenDone shuts srv down (letting requests in flight finish for up to 5 s) when
// ctx ends.
func ShutdownWhenDone(ctx context.Context, srv *http.Server) {
	go func() {
		<-ctx.Done()
		shut, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(shut)
	}()
}

// OpsLimits are the health and metrics servers' connection bounds: kubelet's probes,
// kovsctl and a Prometheus scraper need a few each.
func OpsLimits() Limits { return Limits{Total: 64, PerHost: 16} }

// StreamLimits are the policy stream server's: one or two long-lived connections per
// node, so a total bound only (many nodes can share one address: NAT, the sandbox's
// relay); unauthenticated clients are dropped by the stream's header timeout and
// TokenReview refusal.
func StreamLimits() Limits { return Limits{Total: 16384} }

// Limit wraps ln so that it holds at most l.Total connections, and l.PerHost from one
// client address (unix sockets count as one address). A connection over a bound is closed
// at once (and logged), never queued: a flood from one address cannot hold the server, and
// one from many addresses costs each client a retry.
func Limit(ln net.Listener, l Limits, log logrus.FieldLogger) net.Listener {
	return &limitListener{Listener: ln, limits: l, log: log, perHost: map[string]int{}}
}

type limitListener struct {
	net.Listener
	limits  Limits
	log     logrus.FieldLogger
	mu      sync.Mutex
	total   int
	perHost map[string]int
	refused int // since the last log line
	logged  time.Time
}

func (l *limitListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		host := clientHost(c.RemoteAddr())
		if l.take(host) {
			return &limitedConn{Conn: c, release: func() { l.release(host) }}, nil
		}
		_ = c.Close()
	}
}

// take counts a new connection from host, or refuses it over a bound.
func (l *limitListener) take(host string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if (l.limits.Total > 0 && l.total >= l.limits.Total) || (l.limits.PerHost > 0 && l.perHost[host] >= l.limits.PerHost) {
		l.refused++
		if time.Since(l.logged) > 10*time.Second {
			l.log.WithField("address", l.Addr().String()).WithField("client", host).WithField("refused", l.refused).
				WithField("total", l.total).WithField("fromClient", l.perHost[host]).Warn("connections refused: over the server's bound")
			l.refused, l.logged = 0, time.Now()
		}
		return false
	}
	l.total++
	l.perHost[host]++
	return true
}

func (l *limitListener) release(host string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.total--
	if l.perHost[host]--; l.perHost[host] <= 0 {
		delete(l.perHost, host)
	}
}

type limitedConn struct {
	net.Conn
	once    sync.Once
	release func()
}

func (c *limitedConn) Close() error {
	c.once.Do(c.release)
	return c.Conn.Close()
}

func clientHost(a net.Addr) string {
	if ap, err := netip.ParseAddrPort(a.String()); err == nil {
		return ap.Addr().Unmap().String()
	}
	return a.Network()
}

// Loopback reports whether the request comes from this host's loopback.
func Loopback(r *http.Request) bool {
	ap, err := netip.ParseAddrPort(r.RemoteAddr)
	return err == nil && ap.Addr().Unmap().IsLoopback()
}

// LoopbackOnly answers loopback clients with h and everyone else 403: what only local
// tools need (kovsctl, kubelet's probes with host 127.0.0.1) stays on the host even when
// the server listens on other addresses.
func LoopbackOnly(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !Loopback(r) {
			http.Error(w, "served to this host's loopback only", http.StatusForbidden)
			return
		}
		h.ServeHTTP(w, r)
	})
}

// IsLoopbackAddress reports whether a listen address (host:port) binds loopback only.
func IsLoopbackAddress(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.IsLoopback()
}
