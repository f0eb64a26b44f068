package responder

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// rawSocket is a raw IPv4 or IPv6 socket for SCTP (protocol 132). It is
// non-blocking and served by the Go runtime poller, so read deadlines and
// Close interrupt a pending read. Raw sockets work although this kernel has
// no SCTP: every SCTP packet delivered to the namespace reaches each of them.
type rawSocket struct {
	v6   bool
	file *os.File
	conn syscall.RawConn
}

// errMalformed marks a packet a raw socket delivered that is not IP as
// expected; readers skip it.
var errMalformed = errors.New("malformed packet")

// rawPacket is one SCTP packet read from a raw socket with its addresses.
type rawPacket struct {
	Src     netip.Addr
	Dst     netip.Addr
	Ifindex int    // arrival interface (IPv6 only)
	Payload []byte // the SCTP packet, from its common header
}

// openRawSCTP opens a raw SCTP socket of one family in the calling thread's
// network namespace.
func openRawSCTP(v6 bool) (*rawSocket, error) {
	family := unix.AF_INET
	if v6 {
		family = unix.AF_INET6
	}
	fd, err := unix.Socket(family, unix.SOCK_RAW|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, ipProtoSCTP)
	if err != nil {
		return nil, fmt.Errorf("open raw sctp socket (%s): %w", familyName(v6), err)
	}
	// IPv4 raw sockets deliver the IP header, IPv6 ones do not: ask for the
	// destination address separately.
	if v6 {
		if err := enablePktinfo(fd, true); err != nil {
			unix.Close(fd)
			return nil, fmt.Errorf("raw sctp socket (%s): %w", familyName(v6), err)
		}
	}
	file := os.NewFile(uintptr(fd), "raw-sctp-"+familyName(v6))
	conn, err := file.SyscallConn()
	if err != nil {
		file.Close()
		return nil, fmt.Errorf("raw sctp socket (%s): %w", familyName(v6), err)
	}
	return &rawSocket{v6: v6, file: file, conn: conn}, nil
}

// familyName names an address family in messages.
func familyName(v6 bool) string {
	if v6 {
		return "IPv6"
	}
	return "IPv4"
}

// Close closes the socket, interrupting a pending read.
func (s *rawSocket) Close() error {
	return s.file.Close()
}

// SetReadDeadline bounds pending and future reads.
func (s *rawSocket) SetReadDeadline(t time.Time) error {
	return s.file.SetReadDeadline(t)
}

// bindConnect binds the socket to local and connects it to remote: the kernel
// then sends from local, delivers only packets between the two, and reports
// hard ICMP errors (port or protocol unreachable) as read and write errors.
func (s *rawSocket) bindConnect(local, remote netip.Addr) error {
	var opErr error
	err := s.conn.Control(func(fd uintptr) {
		if opErr = unix.Bind(int(fd), sockaddr(local)); opErr != nil {
			opErr = fmt.Errorf("bind raw sctp socket to %s: %w", local, opErr)
			return
		}
		if opErr = unix.Connect(int(fd), sockaddr(remote)); opErr != nil {
			opErr = fmt.Errorf("connect raw sctp socket to %s: %w", remote, opErr)
		}
	})
	return errors.Join(err, opErr)
}

// recv reads one packet, waiting until one arrives, the deadline passes or
// the socket is closed. buf must hold a whole packet.
func (s *rawSocket) recv(buf []byte) (rawPacket, error) {
	var (
		n     int
		from  unix.Sockaddr
		oob   [oobSize]byte
		oobn  int
		opErr error
	)
	err := s.conn.Read(func(fd uintptr) bool {
		n, oobn, _, from, opErr = unix.Recvmsg(int(fd), buf, oob[:], 0)
		return opErr != unix.EAGAIN
	})
	if err != nil {
		return rawPacket{}, err
	}
	if opErr != nil {
		return rawPacket{}, opErr
	}
	if !s.v6 {
		return parseIPv4(buf[:n])
	}
	src, _ := sockaddrAddr(from)
	dst, ifindex, _ := pktinfoDst(oob[:oobn])
	return rawPacket{Src: src, Dst: dst, Ifindex: ifindex, Payload: buf[:n]}, nil
}

// parseIPv4 splits an IPv4 packet as an IPv4 raw socket delivers it.
func parseIPv4(b []byte) (rawPacket, error) {
	if len(b) < 20 || b[0]>>4 != 4 {
		return rawPacket{}, fmt.Errorf("no IPv4 header: %w", errMalformed)
	}
	hl := int(b[0]&0x0f) * 4
	if hl < 20 || hl > len(b) {
		return rawPacket{}, fmt.Errorf("IPv4 header length %d: %w", hl, errMalformed)
	}
	return rawPacket{
		Src:     netip.AddrFrom4([4]byte(b[12:16])),
		Dst:     netip.AddrFrom4([4]byte(b[16:20])),
		Payload: b[hl:],
	}, nil
}

// send sends an SCTP packet. On an unconnected socket it goes to dst from
// src (the address the request was sent to); on a connected socket dst and
// src are left invalid.
func (s *rawSocket) send(pkt []byte, dst, src netip.Addr, ifindex int) error {
	var to unix.Sockaddr
	if dst.IsValid() {
		sa := sockaddr(dst)
		if sa6, ok := sa.(*unix.SockaddrInet6); ok && dst.IsLinkLocalUnicast() {
			sa6.ZoneId = uint32(ifindex)
		}
		to = sa
	}
	oob := pktinfoSrc(src, ifindex)
	var opErr error
	err := s.conn.Write(func(fd uintptr) bool {
		opErr = unix.Sendmsg(int(fd), pkt, oob, to, 0)
		return opErr != unix.EAGAIN
	})
	return errors.Join(err, opErr)
}

// sockaddr converts an address to a socket address with port 0 (a raw
// socket's protocol is fixed when it is opened).
func sockaddr(a netip.Addr) unix.Sockaddr {
	if a.Is4() {
		return &unix.SockaddrInet4{Addr: a.As4()}
	}
	return &unix.SockaddrInet6{Addr: a.As16()}
}

// sockaddrAddr extracts the IP address of a socket address.
func sockaddrAddr(sa unix.Sockaddr) (netip.Addr, bool) {
	switch sa := sa.(type) {
	case *unix.SockaddrInet4:
		return netip.AddrFrom4(sa.Addr), true
	case *unix.SockaddrInet6:
		return netip.AddrFrom16(sa.Addr).Unmap(), true
	}
	return netip.Addr{}, false
}
