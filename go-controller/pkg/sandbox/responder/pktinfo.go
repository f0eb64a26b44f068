package responder

import (
	"encoding/binary"
	"fmt"
	"net/netip"

	"golang.org/x/sys/unix"
)

// A socket bound to the wildcard address answers from the address the request
// was sent to, not from whatever address routing would pick: the probe (and
// conntrack, after a Service DNAT) only accepts replies from that address.
// IP_PKTINFO / IPV6_PKTINFO tell a datagram's destination on receive and set
// the source on send.

// oobSize is enough room for one IPv4 or IPv6 packet-info control message.
const oobSize = 64

// enablePktinfo asks the kernel to report each datagram's destination address.
func enablePktinfo(fd int, v6 bool) error {
	if v6 {
		if err := unix.SetsockoptInt(fd, unix.IPPROTO_IPV6, unix.IPV6_RECVPKTINFO, 1); err != nil {
			return fmt.Errorf("set IPV6_RECVPKTINFO: %w", err)
		}
		return nil
	}
	if err := unix.SetsockoptInt(fd, unix.IPPROTO_IP, unix.IP_PKTINFO, 1); err != nil {
		return fmt.Errorf("set IP_PKTINFO: %w", err)
	}
	return nil
}

// pktinfoDst extracts the destination address and the arrival interface of a
// datagram from its control messages.
func pktinfoDst(oob []byte) (dst netip.Addr, ifindex int, ok bool) {
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return netip.Addr{}, 0, false
	}
	for _, m := range msgs {
		switch {
		case m.Header.Level == unix.IPPROTO_IP && m.Header.Type == unix.IP_PKTINFO &&
			len(m.Data) >= unix.SizeofInet4Pktinfo:
			// struct in_pktinfo { int ipi_ifindex; in_addr ipi_spec_dst; in_addr ipi_addr; }
			idx := int(int32(binary.NativeEndian.Uint32(m.Data[0:4])))
			return netip.AddrFrom4([4]byte(m.Data[8:12])), idx, true
		case m.Header.Level == unix.IPPROTO_IPV6 && m.Header.Type == unix.IPV6_PKTINFO &&
			len(m.Data) >= unix.SizeofInet6Pktinfo:
			// struct in6_pktinfo { in6_addr ipi6_addr; unsigned int ipi6_ifindex; }
			idx := int(binary.NativeEndian.Uint32(m.Data[16:20]))
			return netip.AddrFrom16([16]byte(m.Data[0:16])), idx, true
		}
	}
	return netip.Addr{}, 0, false
}

// pktinfoSrc builds the control message that sends a reply from src, the
// destination of the request. It returns nil when the kernel should choose
// (no address, or a multicast one, which cannot be a source).
func pktinfoSrc(src netip.Addr, ifindex int) []byte {
	switch {
	case !src.IsValid() || src.IsMulticast():
		return nil
	case src.Is4():
		return unix.PktInfo4(&unix.Inet4Pktinfo{Spec_dst: src.As4()})
	default:
		info := unix.Inet6Pktinfo{Addr: src.As16()}
		if src.IsLinkLocalUnicast() { // only meaningful with its interface
			info.Ifindex = uint32(ifindex)
		}
		return unix.PktInfo6(&info)
	}
}
