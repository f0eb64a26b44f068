package relay

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"
	log "github.com/sirupsen/logrus"
)

// EgressProxy is an HTTP CONNECT proxy on a unix socket for kube-apiserver's egress
// selector (EgressSelectorConfiguration, egress "cluster", proxyProtocol HTTPConnect,
// transport uds): kube-apiserver runs in the root namespace, which has no route to the
// nodes, and sends every connection it opens into the cluster (to a kubelet for `kubectl
// exec` and `logs`, to a pod or Service for the API's proxy) through it. The proxy opens
// each one from inside NetNSPath, a node's namespace, as a control plane that is one of
// the cluster's nodes would: that node reaches every node address, pod and Service.
type EgressProxy struct {
	Socket    string
	NetNSPath string
	// DialTimeout bounds each connection attempt (default 10 s).
	DialTimeout time.Duration
}

// Run serves the proxy until ctx ends.
func (p EgressProxy) Run(ctx context.Context) error {
	_ = os.Remove(p.Socket)
	ln, err := net.Listen("unix", p.Socket)
	if err != nil {
		return fmt.Errorf("egress proxy: listen on %s: %w", p.Socket, err)
	}
	// Only kube-apiserver (root) may open connections into the cluster through it.
	if err := os.Chmod(p.Socket, 0o600); err != nil {
		ln.Close()
		return err
	}
	srv := &http.Server{Handler: p, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		<-ctx.Done()
		srv.Close()
	}()
	if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("egress proxy on %s: %w", p.Socket, err)
	}
	return nil
}

// ServeHTTP answers CONNECT host:port: it dials the target from the node namespace and,
// once connected, relays bytes both ways.
func (p EgressProxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodConnect {
		http.Error(w, "only CONNECT is served", http.StatusMethodNotAllowed)
		return
	}
	target := r.Host
	out, err := p.dial(target)
	if err != nil {
		log.WithError(err).WithField("target", target).Warn("egress proxy: cannot connect")
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	hj, ok := w.(http.Hijacker)
	if !ok {
		out.Close()
		http.Error(w, "connection cannot be hijacked", http.StatusInternalServerError)
		return
	}
	in, buf, err := hj.Hijack()
	if err != nil {
		out.Close()
		return
	}
	defer in.Close()
	defer out.Close()
	if _, err := in.Write([]byte("HTTP/1.1 200 Connection established\r\n\r\n")); err != nil {
		return
	}
	// The client speaks only after the 200, so nothing it sent is buffered yet; anything
	// that is goes first.
	if n := buf.Reader.Buffered(); n > 0 {
		b, _ := buf.Peek(n)
		if _, err := out.Write(b); err != nil {
			return
		}
	}
	pipe(in, out)
}

// dial connects to target from inside the node namespace (the socket keeps the namespace
// it was created in).
func (p EgressProxy) dial(target string) (net.Conn, error) {
	timeout := p.DialTimeout
	if timeout == 0 {
		timeout = 10 * time.Second
	}
	var conn net.Conn
	err := ns.WithNetNSPath(p.NetNSPath, func(ns.NetNS) error {
		var err error
		conn, err = net.DialTimeout("tcp", target, timeout)
		return err
	})
	return conn, err
}
