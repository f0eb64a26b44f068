package kovsctl

import (
	"fmt"
	"net"
	"net/netip"
	"strings"
)

// Protocols kovsctl trace can build packets for.
var protocols = map[string]bool{"tcp": true, "udp": true, "sctp": true, "icmp": true}

// packet is the synthetic packet of a trace, rendered as an ofproto/trace flow.
type packet struct {
	InPort     int
	SrcMAC     net.HardwareAddr
	DstMAC     net.HardwareAddr
	Src, Dst   netip.Addr
	TTL        int
	Proto      string
	SrcPort    int
	DstPort    int
	TunnelSrc  netip.Addr // set when the packet arrives from the tunnel
	TunnelDst  netip.Addr
	TunnelVNI  uint64
	conntracks bool
}

// Spec renders the packet in ofproto/trace's flow syntax.
func (p packet) Spec() string {
	fields := []string{fmt.Sprintf("in_port=%d", p.InPort)}
	if p.TunnelSrc.IsValid() {
		src, dst := "tun_src", "tun_dst"
		if p.TunnelSrc.Is6() {
			src, dst = "tun_ipv6_src", "tun_ipv6_dst"
		}
		fields = append(fields, fmt.Sprintf("tun_id=%#x", p.TunnelVNI), src+"="+p.TunnelSrc.String(), dst+"="+p.TunnelDst.String())
	}
	fields = append(fields, p.protoField(), "dl_src="+p.SrcMAC.String(), "dl_dst="+p.DstMAC.String())
	src, dst := "nw_src", "nw_dst"
	if p.Src.Is6() {
		src, dst = "ipv6_src", "ipv6_dst"
	}
	fields = append(fields, src+"="+p.Src.String(), dst+"="+p.Dst.String(), fmt.Sprintf("nw_ttl=%d", p.TTL))
	switch {
	case p.Proto == "icmp" && p.Src.Is6():
		fields = append(fields, "icmpv6_type=128", "icmpv6_code=0")
	case p.Proto == "icmp":
		fields = append(fields, "icmp_type=8", "icmp_code=0")
	default:
		// ofproto/trace takes tp_src/tp_dst for TCP only: UDP and SCTP ports have their
		// own names there (flows may say tp_dst for all three).
		fields = append(fields, fmt.Sprintf("%s_src=%d", p.Proto, p.SrcPort), fmt.Sprintf("%s_dst=%d", p.Proto, p.DstPort))
	}
	return strings.Join(fields, ",")
}

func (p packet) protoField() string {
	name := p.Proto
	if name == "icmp" && p.Src.Is6() {
		return "icmp6"
	}
	if p.Src.Is6() {
		return name + "6"
	}
	return name
}

// Describe is the packet for people: "tcp 10.244.0.2:40000 -> 10.244.1.3:80".
func (p packet) Describe() string {
	if p.Proto == "icmp" {
		return fmt.Sprintf("icmp echo %s -> %s", p.Src, p.Dst)
	}
	return fmt.Sprintf("%s %s -> %s", p.Proto, netip.AddrPortFrom(p.Src, uint16(p.SrcPort)), netip.AddrPortFrom(p.Dst, uint16(p.DstPort)))
}
