package responder

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"strconv"
	"syscall"
)

// maxDatagram is the largest UDP request or SCTP packet read; longer ones are
// truncated, which does not matter for an INIT or a probe datagram.
const maxDatagram = 65536

// openUDP opens a UDP port of one family and serves it.
func (r *Responder) openUDP(p Port, v6 bool) error {
	network, address := wildcard(UDP, p.Number, v6)
	lc := net.ListenConfig{Control: func(_, _ string, c syscall.RawConn) error {
		var opErr error
		err := c.Control(func(fd uintptr) { opErr = enablePktinfo(int(fd), v6) })
		return errors.Join(err, opErr)
	}}
	pc, err := lc.ListenPacket(context.Background(), network, address)
	if err != nil {
		return err
	}
	r.sockets = append(r.sockets, pc)
	r.wg.Add(1)
	go r.serveUDP(pc.(*net.UDPConn), p)
	return nil
}

// serveUDP answers every datagram with a line, sent from the address the
// datagram was sent to, until the socket is closed.
func (r *Responder) serveUDP(conn *net.UDPConn, p Port) {
	defer r.wg.Done()
	buf := make([]byte, maxDatagram)
	oob := make([]byte, oobSize)
	for {
		_, oobn, _, peer, err := conn.ReadMsgUDPAddrPort(buf, oob)
		if err != nil {
			if r.closing() || errors.Is(err, net.ErrClosed) {
				return
			}
			r.backoff()
			continue
		}
		// The zone Go names comes from the interfaces of whatever namespace
		// this goroutine's thread is in: drop it, and use the index instead.
		peer = netip.AddrPortFrom(peer.Addr().Unmap().WithZone(""), peer.Port())
		reply := Line{Identity: r.identity, Port: p, Peer: peer}.Marshal()
		dst, ifindex, _ := pktinfoDst(oob[:oobn])
		r.replyUDP(conn, reply, peer, dst, ifindex)
	}
}

// replyUDP sends a reply from src, falling back to the kernel's choice of
// source when that fails (a request to a broadcast address, for example).
func (r *Responder) replyUDP(conn *net.UDPConn, reply []byte, to netip.AddrPort, src netip.Addr, ifindex int) {
	if to.Addr().Is6() && to.Addr().IsLinkLocalUnicast() && ifindex != 0 {
		// A numeric zone is an interface index, valid in any namespace.
		to = netip.AddrPortFrom(to.Addr().WithZone(strconv.Itoa(ifindex)), to.Port())
	}
	if oob := pktinfoSrc(src, ifindex); oob != nil {
		if _, _, err := conn.WriteMsgUDPAddrPort(reply, oob, to); err == nil {
			return
		}
	}
	conn.WriteMsgUDPAddrPort(reply, nil, to)
}
