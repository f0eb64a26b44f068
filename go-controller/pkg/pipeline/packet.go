package pipeline

import (
	"fmt"
	"net"
	"net/netip"
	"strings"
)

// Packet is a synthetic packet for the tracer: the header fields the pipeline matches and
// rewrites. IPSrc/IPDst hold IPv4 or IPv6 addresses as EthType says.
type Packet struct {
	InPort  uint32
	EthSrc  net.HardwareAddr
	EthDst  net.HardwareAddr
	EthType uint16

	IPSrc   netip.Addr
	IPDst   netip.Addr
	IPProto uint8
	TTL     uint8
	SrcPort uint16 // TCP, UDP, SCTP
	DstPort uint16
	// Frag are the packet's fragment bits (FragAny, FragLater; 0: not a fragment). OpenFlow
	// sees a fragment's ports as 0, as OVS's normal fragment handling has it.
	Frag     uint8
	ICMPType uint8
	ICMPCode uint8

	ARPOp  uint16
	ARPSpa netip.Addr
	ARPTpa netip.Addr
	ARPSha net.HardwareAddr
	ARPTha net.HardwareAddr

	NDTarget      netip.Addr
	NDSLL         net.HardwareAddr
	NDTLL         net.HardwareAddr
	NDReserved    uint32
	NDOptionsType uint8

	TunID  uint64
	TunSrc netip.Addr
	TunDst netip.Addr
}

// matches reports whether the packet is of protocol p.
func (p *Packet) matches(proto Protocol) bool {
	switch proto {
	case ProtoARP:
		return p.EthType == EthTypeARP
	case ProtoIPv4:
		return p.EthType == EthTypeIPv4
	case ProtoIPv6:
		return p.EthType == EthTypeIPv6
	case ProtoICMPv6:
		return p.EthType == EthTypeIPv6 && p.IPProto == IPProtoICMP6
	}
	if ipv6, ipProto, ok := proto.transport(); ok {
		ethType := EthTypeIPv4
		if ipv6 {
			ethType = EthTypeIPv6
		}
		return p.EthType == ethType && p.nwProto() == ipProto
	}
	return true
}

// get returns field f as big-endian bytes of its width; absent fields are zero.
func (p *Packet) get(f Field) []byte {
	width := f.spec().width
	switch f {
	case FieldInPort:
		return uintValue(uint64(p.InPort), width)
	case FieldEthSrc, FieldEthDst, FieldARPSha, FieldARPTha, FieldNDSLL, FieldNDTLL:
		return macBytes(*p.mac(f))
	case FieldIPv4Src, FieldIPv6Src, FieldIPv4Dst, FieldIPv6Dst, FieldARPSpa, FieldARPTpa,
		FieldNDTarget, FieldTunSrc, FieldTunDst, FieldTunIPv6Src, FieldTunIPv6Dst:
		return addrBytes(*p.addr(f), width)
	case FieldTTL:
		return []byte{p.TTL}
	case FieldARPOp:
		return uintValue(uint64(p.ARPOp), width)
	case FieldICMPv6Type:
		return []byte{p.ICMPType}
	case FieldICMPv6Code:
		return []byte{p.ICMPCode}
	case FieldNDReserved:
		return uintValue(uint64(p.NDReserved), width)
	case FieldNDOptionsType:
		return []byte{p.NDOptionsType}
	case FieldTunID:
		return uintValue(p.TunID, width)
	case FieldTpDst:
		return uintValue(uint64(p.port(p.DstPort)), width)
	case FieldTpSrc:
		return uintValue(uint64(p.port(p.SrcPort)), width)
	case FieldIPFrag:
		return []byte{p.Frag}
	case FieldCTNwProto:
		return []byte{p.IPProto}
	}
	panic(fmt.Sprintf("pipeline: packet has no field %s", f.Name()))
}

// set writes field f from big-endian bytes of its width. It never writes into the bytes
// of a MAC it replaces, so copies of a Packet stay independent.
func (p *Packet) set(f Field, v []byte) {
	switch f {
	case FieldEthSrc, FieldEthDst, FieldARPSha, FieldARPTha, FieldNDSLL, FieldNDTLL:
		*p.mac(f) = net.HardwareAddr(append([]byte(nil), v...))
	case FieldIPv4Src, FieldIPv6Src, FieldIPv4Dst, FieldIPv6Dst, FieldARPSpa, FieldARPTpa,
		FieldNDTarget, FieldTunSrc, FieldTunDst, FieldTunIPv6Src, FieldTunIPv6Dst:
		*p.addr(f), _ = netip.AddrFromSlice(v)
	case FieldTTL:
		p.TTL = v[0]
	case FieldARPOp:
		p.ARPOp = uint16(beUint(v))
	case FieldICMPv6Type:
		p.ICMPType = v[0]
	case FieldICMPv6Code:
		p.ICMPCode = v[0]
	case FieldNDReserved:
		p.NDReserved = uint32(beUint(v))
	case FieldNDOptionsType:
		p.NDOptionsType = v[0]
	case FieldTunID:
		p.TunID = beUint(v)
	case FieldTpDst:
		p.DstPort = uint16(beUint(v))
	case FieldTpSrc:
		p.SrcPort = uint16(beUint(v))
	default:
		panic(fmt.Sprintf("pipeline: cannot set packet field %s", f.Name()))
	}
}

// nwProto is the IP protocol as OpenFlow matches it: in an IPv6 fragment after the first,
// the fragment header's (44), as OVS parses it.
func (p *Packet) nwProto() uint8 {
	if p.EthType == EthTypeIPv6 && p.Frag&FragLater != 0 {
		return ipv6FragmentHeader
	}
	return p.IPProto
}

// ipv6FragmentHeader is the IPv6 next header value of a fragment header.
const ipv6FragmentHeader = 44

// port is an L4 port as OpenFlow matches it: 0 in a fragment.
func (p *Packet) port(n uint16) uint16 {
	if p.Frag&FragAny != 0 {
		return 0
	}
	return n
}

func (p *Packet) mac(f Field) *net.HardwareAddr {
	switch f {
	case FieldEthSrc:
		return &p.EthSrc
	case FieldEthDst:
		return &p.EthDst
	case FieldARPSha:
		return &p.ARPSha
	case FieldARPTha:
		return &p.ARPTha
	case FieldNDSLL:
		return &p.NDSLL
	default:
		return &p.NDTLL
	}
}

func (p *Packet) addr(f Field) *netip.Addr {
	switch f {
	case FieldIPv4Src, FieldIPv6Src:
		return &p.IPSrc
	case FieldIPv4Dst, FieldIPv6Dst:
		return &p.IPDst
	case FieldARPSpa:
		return &p.ARPSpa
	case FieldARPTpa:
		return &p.ARPTpa
	case FieldNDTarget:
		return &p.NDTarget
	case FieldTunSrc, FieldTunIPv6Src:
		return &p.TunSrc
	default:
		return &p.TunDst
	}
}

// macBytes is mac as 6 bytes (zero when unset).
func macBytes(mac net.HardwareAddr) []byte {
	b := make([]byte, 6)
	copy(b, mac)
	return b
}

// addrBytes is a as bytes of width 4 or 16; an address of the other family reads as zero,
// as OVS reads a field whose prerequisites the packet lacks.
func addrBytes(a netip.Addr, width int) []byte {
	if !a.IsValid() || (width == 4) != a.Is4() {
		return make([]byte, width)
	}
	return a.AsSlice()
}

// String summarises the packet for trace output.
func (p Packet) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "in_port=%d %s>%s", p.InPort, p.EthSrc, p.EthDst)
	switch p.EthType {
	case EthTypeARP:
		fmt.Fprintf(&b, " arp op=%d %s(%s)>%s(%s)", p.ARPOp, p.ARPSpa, p.ARPSha, p.ARPTpa, p.ARPTha)
	case EthTypeIPv4, EthTypeIPv6:
		if p.SrcPort != 0 || p.DstPort != 0 {
			fmt.Fprintf(&b, " %s>%s proto=%d ttl=%d",
				netip.AddrPortFrom(p.IPSrc, p.SrcPort), netip.AddrPortFrom(p.IPDst, p.DstPort), p.IPProto, p.TTL)
		} else {
			fmt.Fprintf(&b, " %s>%s proto=%d ttl=%d", p.IPSrc, p.IPDst, p.IPProto, p.TTL)
		}
		if p.IPProto == IPProtoICMP6 {
			fmt.Fprintf(&b, " icmp6 type=%d", p.ICMPType)
		}
		if p.NDTarget.IsValid() {
			fmt.Fprintf(&b, " nd_target=%s sll=%s tll=%s", p.NDTarget, p.NDSLL, p.NDTLL)
		}
	}
	if p.TunDst.IsValid() {
		fmt.Fprintf(&b, " tun_dst=%s tun_id=%d", p.TunDst, p.TunID)
	}
	return b.String()
}
