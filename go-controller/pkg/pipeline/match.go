package pipeline

import (
	"net"
	"net/netip"
	"slices"
	"sort"
	"strings"
)

// Protocol is the protocol shorthand a match starts with (ip, ipv6, arp, icmp6): it fixes
// eth_type and, for icmp6, ip_proto, the prerequisites of the L3/L4 fields.
type Protocol uint8

// Protocols the pipeline matches on.
const (
	ProtoAny Protocol = iota
	ProtoARP
	ProtoIPv4
	ProtoIPv6
	ProtoICMPv6
	ProtoTCP
	ProtoTCP6
	ProtoUDP
	ProtoUDP6
	ProtoSCTP
	ProtoSCTP6
)

func (p Protocol) String() string {
	switch p {
	case ProtoARP:
		return "arp"
	case ProtoIPv4:
		return "ip"
	case ProtoIPv6:
		return "ipv6"
	case ProtoICMPv6:
		return "icmp6"
	case ProtoTCP:
		return "tcp"
	case ProtoTCP6:
		return "tcp6"
	case ProtoUDP:
		return "udp"
	case ProtoUDP6:
		return "udp6"
	case ProtoSCTP:
		return "sctp"
	case ProtoSCTP6:
		return "sctp6"
	}
	return ""
}

// TransportProtocol is the shorthand for IP protocol ipProto (TCP, UDP or SCTP) over
// IPv4 or IPv6, e.g. tcp6; ok is false for other protocols.
func TransportProtocol(ipProto uint8, ipv6 bool) (Protocol, bool) {
	for _, p := range []Protocol{ProtoTCP, ProtoTCP6, ProtoUDP, ProtoUDP6, ProtoSCTP, ProtoSCTP6} {
		if v6, n, _ := p.transport(); n == ipProto && v6 == ipv6 {
			return p, true
		}
	}
	return ProtoAny, false
}

// transport is the family and IP protocol of a transport shorthand (tcp, udp6, ...).
func (p Protocol) transport() (ipv6 bool, ipProto uint8, ok bool) {
	switch p {
	case ProtoTCP, ProtoTCP6:
		return p == ProtoTCP6, IPProtoTCP, true
	case ProtoUDP, ProtoUDP6:
		return p == ProtoUDP6, IPProtoUDP, true
	case ProtoSCTP, ProtoSCTP6:
		return p == ProtoSCTP6, IPProtoSCTP, true
	}
	return false, 0, false
}

// EtherType and IP protocol numbers the pipeline and the tracer use.
const (
	EthTypeIPv4  uint16 = 0x0800
	EthTypeARP   uint16 = 0x0806
	EthTypeIPv6  uint16 = 0x86dd
	IPProtoICMP  uint8  = 1
	IPProtoTCP   uint8  = 6
	IPProtoUDP   uint8  = 17
	IPProtoICMP6 uint8  = 58
	IPProtoSCTP  uint8  = 132
)

// Match is what a flow matches: a protocol and typed fields with optional masks. Methods
// return a new Match, so a partial match can be shared as a base for several flows.
type Match struct {
	proto  Protocol
	fields []fieldMatch
}

type fieldMatch struct {
	field Field
	value []byte
	mask  []byte
}

// MatchAll matches every packet.
func MatchAll() Match { return Match{} }

// MatchProtocol matches packets of protocol p.
func MatchProtocol(p Protocol) Match { return Match{proto: p} }

// WithProtocol returns m matching protocol p.
func (m Match) WithProtocol(p Protocol) Match {
	m.proto = p
	return m
}

// matchesField reports whether the match constrains field f.
func (m Match) matchesField(f Field) bool {
	return slices.ContainsFunc(m.fields, func(fm fieldMatch) bool { return fm.field == f })
}

// Protocol is the match's protocol shorthand.
func (m Match) Protocol() Protocol { return m.proto }

// with returns m plus field f = value/mask, replacing an earlier match on f.
func (m Match) with(f Field, value, mask []byte) Match {
	fields := slices.DeleteFunc(slices.Clone(m.fields), func(fm fieldMatch) bool { return fm.field == f })
	m.fields = append(fields, fieldMatch{field: f, value: value, mask: mask})
	return m
}

func (m Match) exact(f Field, value []byte) Match { return m.with(f, value, allOnes(len(value))) }

// prefix matches field v4 or v6 against p. A /0 prefix matches every address, which
// OVS writes as no match on the field at all.
func (m Match) prefix(v4, v6 Field, p netip.Prefix) Match {
	f, width := v4, 4
	if p.Addr().Is6() {
		f, width = v6, 16
	}
	masked := p.Masked()
	if masked.Bits() == 0 {
		return m
	}
	return m.with(f, addrValue(masked.Addr()), prefixMask(masked.Bits(), width))
}

// InPort matches the ingress ofport.
func (m Match) InPort(port uint32) Match { return m.exact(FieldInPort, uintValue(uint64(port), 4)) }

// EthSrc matches the Ethernet source.
func (m Match) EthSrc(mac net.HardwareAddr) Match { return m.exact(FieldEthSrc, macValue(mac)) }

// EthDst matches the Ethernet destination.
func (m Match) EthDst(mac net.HardwareAddr) Match { return m.exact(FieldEthDst, macValue(mac)) }

// IPSrc matches the IPv4 or IPv6 source (nw_src / ipv6_src) against a prefix.
func (m Match) IPSrc(p netip.Prefix) Match { return m.prefix(FieldIPv4Src, FieldIPv6Src, p) }

// IPDst matches the IPv4 or IPv6 destination (nw_dst / ipv6_dst) against a prefix.
func (m Match) IPDst(p netip.Prefix) Match { return m.prefix(FieldIPv4Dst, FieldIPv6Dst, p) }

// TTL matches the IPv4 TTL or IPv6 hop limit.
func (m Match) TTL(ttl uint8) Match { return m.exact(FieldTTL, []byte{ttl}) }

// ARPOp matches the ARP opcode (1 request, 2 reply).
func (m Match) ARPOp(op uint16) Match { return m.exact(FieldARPOp, uintValue(uint64(op), 2)) }

// ARPSpa matches the ARP sender protocol address.
func (m Match) ARPSpa(p netip.Prefix) Match { return m.prefix(FieldARPSpa, FieldARPSpa, p) }

// ARPTpa matches the ARP target protocol address.
func (m Match) ARPTpa(p netip.Prefix) Match { return m.prefix(FieldARPTpa, FieldARPTpa, p) }

// ARPSha matches the ARP sender hardware address.
func (m Match) ARPSha(mac net.HardwareAddr) Match { return m.exact(FieldARPSha, macValue(mac)) }

// ICMPv6Type matches the ICMPv6 type.
func (m Match) ICMPv6Type(t uint8) Match { return m.exact(FieldICMPv6Type, []byte{t}) }

// ICMPv6Code matches the ICMPv6 code.
func (m Match) ICMPv6Code(c uint8) Match { return m.exact(FieldICMPv6Code, []byte{c}) }

// NDTarget matches the neighbour discovery target address against a prefix.
func (m Match) NDTarget(p netip.Prefix) Match { return m.prefix(FieldNDTarget, FieldNDTarget, p) }

// NDSLL matches the source link-layer address option of a neighbour solicitation
// (00:00:00:00:00:00: no option).
func (m Match) NDSLL(mac net.HardwareAddr) Match { return m.exact(FieldNDSLL, macValue(mac)) }

// NDTLL matches the target link-layer address option of a neighbour advertisement
// (00:00:00:00:00:00: no option).
func (m Match) NDTLL(mac net.HardwareAddr) Match { return m.exact(FieldNDTLL, macValue(mac)) }

// NDOptionsType matches the type of the first ND option.
func (m Match) NDOptionsType(t uint8) Match { return m.exact(FieldNDOptionsType, []byte{t}) }

// CTState matches conntrack state: flags in set must be on, flags in unset off.
func (m Match) CTState(set, unset CTFlags) Match {
	return m.with(FieldCTState, uintValue(uint64(set), 4), uintValue(uint64(set|unset), 4))
}

// CTMark matches ct_mark bits: value under mask.
func (m Match) CTMark(value, mask uint32) Match {
	return m.with(FieldCTMark, uintValue(uint64(value), 4), uintValue(uint64(mask), 4))
}

// Reg matches a register range value. Ranges of one register combine into one masked
// match (reg0=0x3/0xf plus SCTPState 0 is reg0=0x3/0x30f); a range matched again is
// replaced.
func (m Match) Reg(mark RegMark) Match {
	value, mask := mark.bits()
	f := mark.Field.field()
	for _, fm := range m.fields {
		if fm.field == f {
			oldValue, oldMask := uint32(beUint(fm.value)), uint32(beUint(fm.mask))
			value |= oldValue & oldMask &^ mask
			mask |= oldMask
		}
	}
	return m.with(f, uintValue(uint64(value), 4), uintValue(uint64(mask), 4))
}

// ConjID matches the conjunction a conjunctive match completed (conj_id).
func (m Match) ConjID(id uint32) Match { return m.exact(FieldConjID, uintValue(uint64(id), 4)) }

// TpDst matches the TCP, UDP or SCTP destination port under mask; the match's protocol
// must be a transport shorthand (tcp, udp6, ...). Mask 0 matches every port: no match on
// the field, as OVS writes it.
func (m Match) TpDst(port, mask uint16) Match {
	if mask == 0 {
		return m
	}
	return m.with(FieldTpDst, uintValue(uint64(port&mask), 2), uintValue(uint64(mask), 2))
}

// Fragment matches every IP fragment, the first (whose L4 header OpenFlow does not see:
// OVS's normal fragment handling matches a fragment's ports as 0) and the later ones:
// nw_frag=yes.
func (m Match) Fragment() Match { return m.with(FieldIPFrag, []byte{FragAny}, []byte{FragAny}) }

// CTNwProto matches the IP protocol of the connection's original direction, which
// conntrack knows for every fragment of a datagram it reassembled, even where the packet
// itself does not say it (an IPv6 later fragment's nw_proto is 44, its fragment header).
func (m Match) CTNwProto(proto uint8) Match { return m.exact(FieldCTNwProto, []byte{proto}) }

// TunID matches the tunnel key (the Geneve VNI).
func (m Match) TunID(id uint64) Match { return m.exact(FieldTunID, uintValue(id, 8)) }

// TunSrc matches the outer source address of a tunnelled packet (tun_src / tun_ipv6_src).
func (m Match) TunSrc(a netip.Addr) Match {
	return m.prefix(FieldTunSrc, FieldTunIPv6Src, netip.PrefixFrom(a, a.BitLen()))
}

// String renders the match in ovs-ofctl's canonical field order, e.g.
// "icmp6,reg0=0x1/0xf,nw_ttl=255,icmp_type=135".
func (m Match) String() string {
	type part struct {
		rank int
		text string
	}
	var parts []part
	if m.proto != ProtoAny {
		parts = append(parts, part{rankProtocol, m.proto.String()})
	}
	for _, fm := range m.fields {
		text := fm.field.Name() + "=" + fm.field.formatValue(fm.value, fm.mask)
		parts = append(parts, part{fm.field.spec().rank, text})
	}
	sort.SliceStable(parts, func(i, j int) bool { return parts[i].rank < parts[j].rank })
	texts := make([]string, len(parts))
	for i, p := range parts {
		texts[i] = p.text
	}
	return strings.Join(texts, ",")
}

// host is the single-address prefix of a.
func host(a netip.Addr) netip.Prefix { return netip.PrefixFrom(a, a.BitLen()) }
