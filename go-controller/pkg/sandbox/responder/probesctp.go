package responder

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/netip"
	"syscall"
	"time"
)

// Dynamic ports (RFC 6335), from which an SCTP probe picks its source port.
const (
	firstDynamicPort = 49152
	numDynamicPorts  = 65536 - firstDynamicPort
)

// probeSCTP is probeSCTPFrom a random dynamic port.
func probeSCTP(ctx context.Context, t Target, deadline time.Time) Result {
	return probeSCTPFrom(ctx, t, uint16(firstDynamicPort+rand.IntN(numDynamicPorts)), deadline)
}

// ProbeSCTPFromPort is Probe of an SCTP target from source port port. To the network,
// probes from one port are packets of one association (same addresses and ports), so
// repeating them shows whether an association keeps its path, e.g. its Service endpoint.
func ProbeSCTPFromPort(ctx context.Context, target Target, port uint16, timeout time.Duration) Result {
	if target.Port.Protocol != SCTP {
		return Result{Target: target, Error: fmt.Sprintf("ProbeSCTPFromPort: want an SCTP target, got %s", target)}
	}
	return ProbeFromPort(ctx, target, port, timeout)
}

// probeSCTPFrom sends an INIT from port port with a random initiate tag, again every
// retransmitInterval, until an INIT-ACK (connected) or an ABORT (refused) answers it, or
// the deadline passes.
func probeSCTPFrom(ctx context.Context, t Target, port uint16, deadline time.Time) Result {
	src, err := sourceAddr(t)
	if err != nil {
		return failed(ctx, err, deadline)
	}
	s, err := openRawSCTP(t.Addr.Is6())
	if err != nil {
		return failed(ctx, err, deadline)
	}
	defer s.Close()
	if err := s.bindConnect(src, t.Addr); err != nil {
		return failed(ctx, err, deadline)
	}
	tag := randomTag()
	local := netip.AddrPortFrom(src, port)
	init := newInit(port, t.Port.Number, tag).marshal()
	stop := interruptOnDone(ctx, s)
	defer stop()
	reply, err := exchangeInit(ctx, s, init, deadline, func(b []byte) (sctpReply, bool) {
		return parseInitReply(b, port, t.Port.Number, tag)
	})
	if err != nil {
		return withLocal(sctpFailed(ctx, err, deadline), local)
	}
	if reply.Aborted {
		return Result{Refused: true, Local: local, Error: "refused: the peer answered the INIT with an ABORT"}
	}
	res := Result{Connected: true, Local: local}
	res.setReply(string(reply.Cookie))
	return res
}

// sourceAddr returns the address the kernel would send from to reach t, the
// way a UDP connect finds it (no packet is sent).
func sourceAddr(t Target) (netip.Addr, error) {
	network := "udp4"
	if t.Addr.Is6() {
		network = "udp6"
	}
	c, err := net.DialUDP(network, nil, net.UDPAddrFromAddrPort(t.addrPort()))
	if err != nil {
		return netip.Addr{}, fmt.Errorf("find a source address for %s: %w", t.Addr, err)
	}
	defer c.Close()
	return addrPort(c.LocalAddr()).Addr(), nil
}

// exchangeInit sends init and waits for a packet match accepts, resending
// init every retransmitInterval until the deadline.
func exchangeInit(ctx context.Context, s *rawSocket, init []byte, deadline time.Time,
	match func([]byte) (sctpReply, bool)) (sctpReply, error) {
	buf := make([]byte, maxDatagram)
	for {
		if err := s.send(init, netip.Addr{}, netip.Addr{}, 0); err != nil {
			return sctpReply{}, fmt.Errorf("send INIT: %w", err)
		}
		// As in probeUDP: deadline first, then ctx.
		s.SetReadDeadline(earliest(time.Now().Add(retransmitInterval), deadline))
		if ctx.Err() != nil {
			return sctpReply{}, ctx.Err()
		}
		reply, err := awaitReply(s, buf, match)
		if err == nil {
			return reply, nil
		}
		if !retry(ctx, err, deadline) {
			return sctpReply{}, fmt.Errorf("wait for INIT-ACK: %w", err)
		}
	}
}

// awaitReply reads packets until match accepts one or a read fails (the read
// deadline passes or an ICMP error arrives).
func awaitReply(s *rawSocket, buf []byte, match func([]byte) (sctpReply, bool)) (sctpReply, error) {
	for {
		pkt, err := s.recv(buf)
		if errors.Is(err, errMalformed) {
			continue
		}
		if err != nil {
			return sctpReply{}, err
		}
		if reply, ok := match(pkt.Payload); ok {
			return reply, nil
		}
	}
}

// sctpFailed is the result of an SCTP probe that did not connect. Besides
// port unreachable, an ICMP protocol unreachable (IPv4) or parameter problem
// (IPv6) is a refusal: the peer has no SCTP at all, as a namespace with no
// responder on this kernel.
func sctpFailed(ctx context.Context, err error, deadline time.Time) Result {
	if errors.Is(err, syscall.ENOPROTOOPT) || errors.Is(err, syscall.EPROTO) {
		return Result{Refused: true, Error: fmt.Sprintf("refused: protocol unreachable: %v", err)}
	}
	return failed(ctx, err, deadline)
}
