package responder

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"time"
)

// tcpIdle bounds how long an answered connection may stay silent. Until then the
// responder echoes whatever the client sends: a long-lived connection whose every
// round trip proves the path still works (restart tests hold such connections open).
const tcpIdle = 10 * time.Minute

// wildcard returns the "any" address of a family with a port, as a string
// for net.Listen and a network name ("tcp4", "udp6", ...).
func wildcard(proto Protocol, port uint16, v6 bool) (network, address string) {
	if v6 {
		// Go sets IPV6_V6ONLY on "tcp6"/"udp6" sockets: IPv4 has its own.
		return string(proto) + "6", fmt.Sprintf("[::]:%d", port)
	}
	return string(proto) + "4", fmt.Sprintf("0.0.0.0:%d", port)
}

// openTCP listens on a TCP port of one family and serves it.
func (r *Responder) openTCP(p Port, v6 bool) error {
	network, address := wildcard(TCP, p.Number, v6)
	var lc net.ListenConfig
	ln, err := lc.Listen(context.Background(), network, address)
	if err != nil {
		return err
	}
	r.sockets = append(r.sockets, ln)
	r.wg.Add(1)
	go r.serveTCP(ln.(*net.TCPListener), p)
	return nil
}

// serveTCP accepts connections until the listener is closed.
func (r *Responder) serveTCP(ln *net.TCPListener, p Port) {
	defer r.wg.Done()
	for {
		conn, err := ln.AcceptTCP()
		if err != nil {
			if r.closing() || errors.Is(err, net.ErrClosed) {
				return
			}
			r.backoff()
			continue
		}
		r.wg.Add(1)
		go r.answerTCP(conn, p)
	}
}

// answerTCP writes the line to one connection, then echoes what the client
// sends until the client closes, tcpIdle passes without data, or the responder
// closes. A client that only wants the line reads it and closes (so the
// responder's close is a FIN, never a RST that could discard the line).
func (r *Responder) answerTCP(conn *net.TCPConn, p Port) {
	defer r.wg.Done()
	defer conn.Close()
	stop := context.AfterFunc(r.done, func() { conn.SetDeadline(time.Now()) })
	defer stop()
	conn.SetDeadline(time.Now().Add(tcpIdle))
	if _, err := conn.Write(r.line(p, conn.RemoteAddr()).Marshal()); err != nil {
		return
	}
	buf := make([]byte, 4096)
	for {
		n, err := conn.Read(buf)
		if n > 0 {
			if _, werr := conn.Write(buf[:n]); werr != nil {
				return
			}
			conn.SetDeadline(time.Now().Add(tcpIdle))
		}
		if err != nil {
			return
		}
	}
}

// addrPort converts a TCP or UDP address to a netip.AddrPort, with IPv4
// addresses in their 4-byte form.
func addrPort(a net.Addr) netip.AddrPort {
	var ap netip.AddrPort
	switch a := a.(type) {
	case *net.TCPAddr:
		ap = a.AddrPort()
	case *net.UDPAddr:
		ap = a.AddrPort()
	}
	// Go names a zone after an interface of the namespace the current
	// thread is in, which is not the socket's: leave zones out.
	return netip.AddrPortFrom(ap.Addr().Unmap().WithZone(""), ap.Port())
}
