package responder

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"syscall"
	"time"
)

// Probe timing and sizes.
const (
	// retransmitInterval is how often a UDP datagram or an SCTP INIT is sent
	// again while no answer has come, in case the first one was dropped.
	retransmitInterval = 250 * time.Millisecond
	// maxLineLen bounds the reply read from a TCP server.
	maxLineLen = 4096
	// LineGrace is how long a TCP probe that connected keeps waiting for the server's
	// line, past its own deadline if need be. When a handshake packet had to be sent
	// again, the server has no round-trip sample and Linux sets its retransmission
	// timeout to 3 s (RFC 6298 section 5.7, TCP_TIMEOUT_FALLBACK), so a line lost once
	// comes again only 3 s later. The wait cannot turn a drop into an answer: the
	// connection is already the answer (the path let the handshake through both ways);
	// the line only says who answered. The probe's Duration shows how long it took.
	LineGrace = 4 * time.Second
)

// probeDatagram is what a UDP probe sends; the responder answers any datagram.
const probeDatagram = "kovs-probe\n"

// Result is the outcome of one probe.
type Result struct {
	Target Target `json:"target"`
	// Connected: a TCP connection was established, a UDP reply came back, or
	// an SCTP INIT was answered with an INIT-ACK.
	Connected bool `json:"connected"`
	// Refused: a TCP RST, an ICMP port (or, for SCTP, protocol) unreachable,
	// an SCTP ABORT, or a send the sending host's own firewall rejected (EPERM).
	// Neither Connected nor Refused means no answer.
	Refused bool `json:"refused"`
	// TimedOut: nothing came back before the deadline (what a firewall that drops, as
	// NetworkPolicy does, looks like). A probe that is neither Connected, Refused nor
	// TimedOut failed for another reason (Error says which).
	TimedOut bool `json:"timedOut,omitempty"`
	// Reply is the responder line, when one was received and parsed.
	Reply *Line `json:"reply,omitempty"`
	// Local is the probe's own address and port.
	Local netip.AddrPort `json:"local"`
	// Error says what went wrong, if anything did (empty when the probe
	// connected and read a responder line).
	Error    string        `json:"error,omitempty"`
	Duration time.Duration `json:"duration"`
}

// String summarizes the result on one line, for example
//
//	connected 10.0.0.5:80/tcp local=10.0.0.2:40000 identity=ns/pod peer=10.0.0.2:40000 time=1.2ms
func (r Result) String() string {
	status := "not connected"
	switch {
	case r.Connected:
		status = "connected"
	case r.Refused:
		status = "refused"
	}
	s := fmt.Sprintf("%s %s local=%s", status, r.Target, r.Local)
	if r.Reply != nil {
		s += fmt.Sprintf(" identity=%s peer=%s", r.Reply.Identity, r.Reply.Peer)
	}
	if r.Error != "" {
		s += fmt.Sprintf(" error=%q", r.Error)
	}
	return s + fmt.Sprintf(" time=%s", r.Duration.Round(time.Microsecond))
}

// Probe connects to target and reports what happened, waiting at most
// timeout (or until ctx is done). It must be called on an OS thread in the
// source network namespace: its sockets are created in the calling goroutine.
func Probe(ctx context.Context, target Target, timeout time.Duration) Result {
	start := time.Now()
	deadline := start.Add(timeout)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	var res Result
	port, err := target.Port.normalize()
	switch {
	case err != nil:
		res.Error = err.Error()
	case !target.Addr.IsValid():
		res.Error = "target has no address"
	default:
		target = Target{Addr: target.Addr.Unmap(), Port: port}
		res = probe(ctx, target, 0, deadline)
	}
	res.Target = target
	res.Duration = time.Since(start)
	return res
}

// ProbeFromPort is Probe from source port src (TCP, UDP or SCTP). A test that must know
// every probe is a new connection to the network (no conntrack entry of an earlier probe
// with the same addresses and ports) picks ports it has not used lately; probes from one
// port, on the other hand, are packets of one connection or association.
func ProbeFromPort(ctx context.Context, target Target, src uint16, timeout time.Duration) Result {
	start := time.Now()
	var res Result
	port, err := target.Port.normalize()
	switch {
	case err != nil:
		res.Error = err.Error()
	case !target.Addr.IsValid() || src == 0:
		res.Error = fmt.Sprintf("ProbeFromPort: want a target with an address and a source port, got %s from port %d", target, src)
	default:
		target = Target{Addr: target.Addr.Unmap(), Port: port}
		res = probe(ctx, target, src, start.Add(timeout))
	}
	res.Target = target
	res.Duration = time.Since(start)
	return res
}

// ProbeDatagram is Probe of a UDP target with a datagram of size bytes (the probe's
// text, padded), larger than the path's MTU to have it sent in fragments.
func ProbeDatagram(ctx context.Context, target Target, size int, timeout time.Duration) Result {
	start := time.Now()
	var res Result
	port, err := target.Port.normalize()
	switch {
	case err != nil:
		res.Error = err.Error()
	case !target.Addr.IsValid() || port.Protocol != UDP:
		res.Error = fmt.Sprintf("ProbeDatagram: want a UDP target with an address, got %s", target)
	case size < len(probeDatagram) || size > maxDatagram-48:
		res.Error = fmt.Sprintf("ProbeDatagram: size %d is not between %d and %d bytes", size, len(probeDatagram), maxDatagram-48)
	default:
		target = Target{Addr: target.Addr.Unmap(), Port: port}
		payload := make([]byte, size)
		copy(payload, probeDatagram)
		for i := len(probeDatagram); i < size; i++ {
			payload[i] = '.'
		}
		res = probeUDP(ctx, target, 0, payload, start.Add(timeout))
	}
	res.Target = target
	res.Duration = time.Since(start)
	return res
}

// probe dispatches on the target's protocol; src is the source port (0: any).
func probe(ctx context.Context, t Target, src uint16, deadline time.Time) Result {
	switch t.Port.Protocol {
	case TCP:
		return probeTCP(ctx, t, src, deadline)
	case UDP:
		return probeUDP(ctx, t, src, []byte(probeDatagram), deadline)
	}
	if src == 0 {
		return probeSCTP(ctx, t, deadline)
	}
	return probeSCTPFrom(ctx, t, src, deadline)
}

// network returns "tcp4", "udp6", ... for a target.
func network(t Target) string {
	if t.Addr.Is4() {
		return string(t.Port.Protocol) + "4"
	}
	return string(t.Port.Protocol) + "6"
}

// probeTCP connects from port src (0: any) and reads the line the server sends.
func probeTCP(ctx context.Context, t Target, src uint16, deadline time.Time) Result {
	d := net.Dialer{Deadline: deadline}
	if src != 0 {
		d.LocalAddr = &net.TCPAddr{Port: int(src)}
	}
	conn, err := d.DialContext(ctx, network(t), t.addrPort().String())
	if err != nil {
		return failed(ctx, err, deadline)
	}
	if tc, ok := conn.(*net.TCPConn); ok && src != 0 {
		// Close with a reset: no TIME_WAIT keeps the port, so the next probe from it can
		// bind it at once (a new connection of the same tuple).
		_ = tc.SetLinger(0)
	}
	defer conn.Close()
	res := Result{Connected: true, Local: addrPort(conn.LocalAddr())}
	conn.SetDeadline(latest(deadline, time.Now().Add(LineGrace)))
	stop := interruptOnDone(ctx, conn)
	defer stop()
	line, err := bufio.NewReader(io.LimitReader(conn, maxLineLen)).ReadString('\n')
	if err != nil && !(errors.Is(err, io.EOF) && line != "") {
		res.Error = fmt.Sprintf("connected, but read no line: %v", err)
		return res
	}
	res.setReply(line)
	return res
}

// probeUDP sends payload from port src (0: any), again every retransmitInterval, until a reply
// or an ICMP error comes back or the deadline passes.
func probeUDP(ctx context.Context, t Target, src uint16, payload []byte, deadline time.Time) Result {
	var laddr *net.UDPAddr
	if src != 0 {
		laddr = &net.UDPAddr{Port: int(src)}
	}
	conn, err := net.DialUDP(network(t), laddr, net.UDPAddrFromAddrPort(t.addrPort()))
	if err != nil {
		return failed(ctx, err, deadline)
	}
	defer conn.Close()
	local := addrPort(conn.LocalAddr())
	stop := interruptOnDone(ctx, conn)
	defer stop()
	buf := make([]byte, maxLineLen)
	for {
		if _, err := conn.Write(payload); err != nil {
			return withLocal(failed(ctx, err, deadline), local)
		}
		// Set the deadline before looking at ctx: interruptOnDone's
		// deadline, if ctx is done later, then wins.
		conn.SetReadDeadline(earliest(time.Now().Add(retransmitInterval), deadline))
		if ctx.Err() != nil {
			return withLocal(failed(ctx, ctx.Err(), deadline), local)
		}
		n, err := conn.Read(buf)
		if err == nil {
			res := Result{Connected: true, Local: local}
			res.setReply(string(buf[:n]))
			return res
		}
		if errors.Is(err, syscall.EMSGSIZE) && time.Now().Before(deadline) && ctx.Err() == nil {
			// An ICMPv6 Packet Too Big (a router on the way does not fragment: the
			// host forwarding a NodePort's datagram to a smaller pod MTU): no answer,
			// but the kernel now knows the path MTU and fragments the next send to it.
			continue
		}
		if !retry(ctx, err, deadline) {
			return withLocal(failed(ctx, err, deadline), local)
		}
	}
}

// setReply parses the responder line the probe received.
func (r *Result) setReply(s string) {
	line, err := ParseLine(s)
	if err != nil {
		r.Error = fmt.Sprintf("connected, but the answer is not a responder line: %v", err)
		return
	}
	r.Reply = &line
}

// retry reports whether a read that failed with err was only waiting for the
// next retransmission.
func retry(ctx context.Context, err error, deadline time.Time) bool {
	return errors.Is(err, os.ErrDeadlineExceeded) && time.Now().Before(deadline) && ctx.Err() == nil
}

// failed is the result of a probe that did not connect because of err.
func failed(ctx context.Context, err error, deadline time.Time) Result {
	switch {
	case errors.Is(err, syscall.ECONNREFUSED):
		return Result{Refused: true, Error: err.Error()}
	case errors.Is(err, syscall.EPERM):
		// A REJECT in the sending host's own netfilter output path: the kernel fails
		// the send (UDP) instead of delivering an ICMP error to the socket.
		return Result{Refused: true, Error: "refused by the sending host's firewall: " + err.Error()}
	case ctx.Err() != nil:
		return Result{Error: fmt.Sprintf("probe cancelled: %v", err)}
	case errors.Is(err, os.ErrDeadlineExceeded) || !time.Now().Before(deadline):
		return Result{TimedOut: true, Error: fmt.Sprintf("no answer before the deadline: %v", err)}
	}
	return Result{Error: err.Error()}
}

// withLocal sets the local address of a result.
func withLocal(r Result, local netip.AddrPort) Result {
	r.Local = local
	return r
}

// earliest returns the earlier of two times.
func earliest(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

func latest(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// deadliner is a connection or socket whose blocked reads a deadline ends.
type deadliner interface {
	SetReadDeadline(time.Time) error
}

// interruptOnDone ends blocked reads on c when ctx is done; the returned
// function stops watching.
func interruptOnDone(ctx context.Context, c deadliner) func() bool {
	return context.AfterFunc(ctx, func() { c.SetReadDeadline(time.Unix(1, 0)) })
}
