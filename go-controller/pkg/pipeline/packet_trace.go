package pipeline

import (
	"fmt"
	"strconv"
	"strings"
)

// TraceFlow renders the packet in the flow syntax `ovs-appctl ofproto/trace` takes, as
// `kovsctl trace` sends it to OVS: an IPv4 or IPv6 TCP, UDP or SCTP packet, or an ICMP
// echo request, from a port, or from the tunnel with the tunnel's metadata. It is the
// same packet the Tracer runs through compiled flows.
func (p Packet) TraceFlow() string {
	fields := []string{"in_port=" + strconv.FormatUint(uint64(p.InPort), 10)}
	if p.TunSrc.IsValid() {
		src, dst := "tun_src", "tun_dst"
		if p.TunSrc.Is6() {
			src, dst = "tun_ipv6_src", "tun_ipv6_dst"
		}
		fields = append(fields, fmt.Sprintf("tun_id=%#x", p.TunID), src+"="+p.TunSrc.String(), dst+"="+p.TunDst.String())
	}
	v6 := p.EthType == EthTypeIPv6
	fields = append(fields, p.traceProtocol(v6), "dl_src="+p.EthSrc.String(), "dl_dst="+p.EthDst.String())
	src, dst := "nw_src", "nw_dst"
	if v6 {
		src, dst = "ipv6_src", "ipv6_dst"
	}
	fields = append(fields, src+"="+p.IPSrc.String(), dst+"="+p.IPDst.String(), "nw_ttl="+strconv.Itoa(int(p.TTL)))
	switch p.IPProto {
	case IPProtoICMP6:
		fields = append(fields, fmt.Sprintf("icmpv6_type=%d", p.ICMPType), fmt.Sprintf("icmpv6_code=%d", p.ICMPCode))
	case IPProtoICMP:
		fields = append(fields, fmt.Sprintf("icmp_type=%d", p.ICMPType), fmt.Sprintf("icmp_code=%d", p.ICMPCode))
	default:
		// ofproto/trace takes tp_src/tp_dst for TCP only: UDP and SCTP ports have their
		// own names there (flows may say tp_dst for all three).
		l4 := map[uint8]string{IPProtoTCP: "tcp", IPProtoUDP: "udp", IPProtoSCTP: "sctp"}[p.IPProto]
		fields = append(fields, fmt.Sprintf("%s_src=%d", l4, p.SrcPort), fmt.Sprintf("%s_dst=%d", l4, p.DstPort))
	}
	return strings.Join(fields, ",")
}

// traceProtocol is the protocol shorthand ofproto/trace starts the packet with.
func (p Packet) traceProtocol(v6 bool) string {
	switch p.IPProto {
	case IPProtoICMP:
		return "icmp"
	case IPProtoICMP6:
		return "icmp6"
	}
	proto, _ := TransportProtocol(p.IPProto, v6)
	return proto.String()
}
