// Package responder is the network side of the sandbox's pods: a responder
// that answers on TCP, UDP and SCTP ports with a line naming the pod, and a
// probe that connects to such a port and reports what it saw.
//
// Both are meant to run in a pod's network namespace, which needs no
// container: the caller enters the namespace on a locked OS thread (for
// example with ns.WithNetNSPath) only for the call to Serve or Probe. These
// create all their sockets before they return (Serve) or in the calling
// goroutine (Probe), and a socket stays in the namespace it was created in.
//
// SCTP is spoken over raw sockets, since the sandbox kernel has no SCTP
// sockets: the responder answers an INIT with an INIT-ACK whose State Cookie
// is its line, or with an ABORT for a port it does not serve, and the probe
// sends the INIT. No association is ever established. Since every raw socket
// sees every SCTP packet, run one responder per namespace: a second one would
// refuse the first one's ports.
package responder

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"syscall"
	"time"
)

// Responder serves a set of ports in one network namespace until Close.
type Responder struct {
	identity string
	ports    []Port

	done    context.Context // done when the responder is closing
	cancel  context.CancelFunc
	sockets []io.Closer
	wg      sync.WaitGroup // serving goroutines

	closeOnce sync.Once
	closeErr  error
	stopWatch func() bool // stops the watch on the caller's context
}

// Serve starts answering on ports, over IPv4 and IPv6 on all addresses, with
// lines carrying identity (for example "namespace/pod"). It must be called on
// an OS thread in the target network namespace: every socket is created
// before Serve returns, and served by goroutines that may run anywhere.
//
// TCP: each accepted connection gets one line, then is closed. UDP: each
// datagram gets one line back. SCTP: an INIT gets an INIT-ACK with the line as
// its State Cookie. A port already in use fails Serve with an error naming it.
// The responder stops when ctx is done or Close is called.
func Serve(ctx context.Context, ports []Port, identity string) (*Responder, error) {
	if err := validateIdentity(identity); err != nil {
		return nil, fmt.Errorf("serve: %w", err)
	}
	ports, err := normalizePorts(ports)
	if err != nil {
		return nil, fmt.Errorf("serve: %w", err)
	}
	done, cancel := context.WithCancel(context.WithoutCancel(ctx))
	r := &Responder{identity: identity, ports: ports, done: done, cancel: cancel}
	success := false
	defer func() {
		if !success {
			r.Close()
		}
	}()
	for _, p := range ports {
		if err := r.openPort(p); err != nil {
			return nil, err
		}
	}
	if err := r.openSCTP(); err != nil {
		return nil, err
	}
	r.stopWatch = context.AfterFunc(ctx, func() { r.Close() })
	success = true
	return r, nil
}

// normalizePorts validates the ports and drops duplicates (a pod may list the
// same port in two containers).
func normalizePorts(ports []Port) ([]Port, error) {
	seen := make(map[Port]bool, len(ports))
	out := make([]Port, 0, len(ports))
	for _, p := range ports {
		p, err := p.normalize()
		if err != nil {
			return nil, err
		}
		if seen[p] {
			continue
		}
		seen[p] = true
		out = append(out, p)
	}
	return out, nil
}

// openPort opens and serves the IPv4 and IPv6 sockets of a TCP or UDP port.
// SCTP ports share the raw sockets opened by openSCTP.
func (r *Responder) openPort(p Port) error {
	for _, v6 := range []bool{false, true} {
		var err error
		switch p.Protocol {
		case TCP:
			err = r.openTCP(p, v6)
		case UDP:
			err = r.openUDP(p, v6)
		}
		if v6 && errors.Is(err, syscall.EAFNOSUPPORT) {
			continue // a kernel booted without IPv6
		}
		if err != nil {
			return fmt.Errorf("serve %s over %s: %w", p, familyName(v6), err)
		}
	}
	return nil
}

// Ports returns the ports being served.
func (r *Responder) Ports() []Port {
	return append([]Port(nil), r.ports...)
}

// Identity returns the identity the responder answers with.
func (r *Responder) Identity() string {
	return r.identity
}

// Close stops serving, closes every socket and waits for the serving
// goroutines to return; the ports are free again when it returns. It is safe
// to call more than once.
func (r *Responder) Close() error {
	r.closeOnce.Do(func() {
		if r.stopWatch != nil {
			r.stopWatch()
		}
		r.cancel()
		var errs []error
		for _, s := range r.sockets {
			errs = append(errs, s.Close())
		}
		r.wg.Wait()
		r.closeErr = errors.Join(errs...)
	})
	return r.closeErr
}

// closing reports whether Close has started; serving loops return when a
// read fails and this is true.
func (r *Responder) closing() bool {
	return r.done.Err() != nil
}

// line returns the line answering peer on port p.
func (r *Responder) line(p Port, peer net.Addr) Line {
	return Line{Identity: r.identity, Port: p, Peer: addrPort(peer)}
}

// backoff pauses a serving loop after an unexpected error so that a
// persistent one (for example EMFILE) does not spin.
func (r *Responder) backoff() {
	select {
	case <-r.done.Done():
	case <-time.After(50 * time.Millisecond):
	}
}
