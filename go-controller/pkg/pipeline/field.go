package pipeline

import (
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"
	"strings"
)

// Field is an OpenFlow match or set_field field. Its spec says how ovs-ofctl names and
// prints it, so matches and actions render exactly as `ovs-ofctl dump-flows` shows them.
type Field uint8

// The fields the pipeline matches, sets or moves.
const (
	FieldInPort Field = iota + 1
	FieldEthSrc
	FieldEthDst
	FieldIPv4Src
	FieldIPv4Dst
	FieldIPv6Src
	FieldIPv6Dst
	FieldTTL
	FieldARPOp
	FieldARPSpa
	FieldARPTpa
	FieldARPSha
	FieldARPTha
	FieldICMPv6Type
	FieldICMPv6Code
	FieldNDTarget
	FieldNDSLL
	FieldNDTLL
	FieldNDReserved
	FieldNDOptionsType
	FieldTunID
	FieldTunSrc
	FieldTunDst
	FieldTunIPv6Src
	FieldTunIPv6Dst
	FieldCTState
	FieldReg0
	FieldReg1
	FieldReg2
	FieldReg3
	FieldConjID
	FieldTpDst
	FieldReg4
	FieldTpSrc
	FieldCTMark
	FieldIPFrag
	FieldCTNwProto
)

// valueFormat is how ovs-ofctl prints a field's value.
type valueFormat uint8

const (
	formatDecimal valueFormat = iota
	formatHex
	formatMAC
	formatIPv4
	formatIPv6
	formatCTState
	formatPort // decimal when exact, hex value/mask when masked
	formatFrag // nw_frag's keywords: yes, no, first, later, not_later
)

// fieldSpec describes one field to the renderer and the tracer.
type fieldSpec struct {
	name   string      // in matches and set_field
	setAs  string      // in set_field, when ovs-ofctl spells it differently
	nxm    string      // in move, e.g. NXM_OF_ETH_SRC
	width  int         // bytes
	format valueFormat // value syntax
	rank   int         // position in ovs-ofctl's canonical match order
}

// Canonical match order as `ovs-ofctl dump-flows` prints it (OVS 3.1): conntrack fields,
// the protocol shorthand, registers, tunnel metadata, in_port, L2, L3, L4, then ND.
const (
	rankConjID   = 5
	rankCT       = 10
	rankProtocol = 20
	rankReg      = 30
)

func (f Field) spec() fieldSpec {
	switch f {
	case FieldInPort:
		return fieldSpec{"in_port", "", "NXM_OF_IN_PORT", 4, formatDecimal, 60}
	case FieldEthSrc:
		return fieldSpec{"dl_src", "eth_src", "NXM_OF_ETH_SRC", 6, formatMAC, 70}
	case FieldEthDst:
		return fieldSpec{"dl_dst", "eth_dst", "NXM_OF_ETH_DST", 6, formatMAC, 71}
	case FieldIPv6Src:
		return fieldSpec{"ipv6_src", "", "NXM_NX_IPV6_SRC", 16, formatIPv6, 80}
	case FieldIPv6Dst:
		return fieldSpec{"ipv6_dst", "", "NXM_NX_IPV6_DST", 16, formatIPv6, 81}
	case FieldIPv4Src:
		return fieldSpec{"nw_src", "ip_src", "NXM_OF_IP_SRC", 4, formatIPv4, 82}
	case FieldIPv4Dst:
		return fieldSpec{"nw_dst", "ip_dst", "NXM_OF_IP_DST", 4, formatIPv4, 83}
	case FieldARPSpa:
		return fieldSpec{"arp_spa", "", "NXM_OF_ARP_SPA", 4, formatIPv4, 82}
	case FieldARPTpa:
		return fieldSpec{"arp_tpa", "", "NXM_OF_ARP_TPA", 4, formatIPv4, 83}
	case FieldTTL:
		return fieldSpec{"nw_ttl", "", "NXM_NX_IP_TTL", 1, formatDecimal, 85}
	case FieldARPOp:
		return fieldSpec{"arp_op", "", "NXM_OF_ARP_OP", 2, formatDecimal, 86}
	case FieldARPSha:
		return fieldSpec{"arp_sha", "", "NXM_NX_ARP_SHA", 6, formatMAC, 87}
	case FieldARPTha:
		return fieldSpec{"arp_tha", "", "NXM_NX_ARP_THA", 6, formatMAC, 88}
	case FieldICMPv6Type:
		return fieldSpec{"icmp_type", "icmpv6_type", "NXM_NX_ICMPV6_TYPE", 1, formatDecimal, 90}
	case FieldICMPv6Code:
		return fieldSpec{"icmp_code", "icmpv6_code", "NXM_NX_ICMPV6_CODE", 1, formatDecimal, 91}
	case FieldNDTarget:
		return fieldSpec{"nd_target", "", "NXM_NX_ND_TARGET", 16, formatIPv6, 92}
	case FieldNDSLL:
		return fieldSpec{"nd_sll", "", "NXM_NX_ND_SLL", 6, formatMAC, 93}
	case FieldNDTLL:
		return fieldSpec{"nd_tll", "", "NXM_NX_ND_TLL", 6, formatMAC, 94}
	case FieldNDReserved:
		return fieldSpec{"nd_reserved", "", "", 4, formatDecimal, 95}
	case FieldNDOptionsType:
		return fieldSpec{"nd_options_type", "", "", 1, formatDecimal, 96}
	case FieldTunID:
		return fieldSpec{"tun_id", "", "NXM_NX_TUN_ID", 8, formatHex, 40}
	case FieldTunSrc:
		return fieldSpec{"tun_src", "", "NXM_NX_TUN_IPV4_SRC", 4, formatIPv4, 41}
	case FieldTunDst:
		return fieldSpec{"tun_dst", "", "NXM_NX_TUN_IPV4_DST", 4, formatIPv4, 42}
	case FieldTunIPv6Src:
		return fieldSpec{"tun_ipv6_src", "", "NXM_NX_TUN_IPV6_SRC", 16, formatIPv6, 43}
	case FieldTunIPv6Dst:
		return fieldSpec{"tun_ipv6_dst", "", "NXM_NX_TUN_IPV6_DST", 16, formatIPv6, 44}
	case FieldCTState:
		return fieldSpec{"ct_state", "", "NXM_NX_CT_STATE", 4, formatCTState, rankCT}
	case FieldConjID:
		return fieldSpec{"conj_id", "", "NXM_NX_CONJ_ID", 4, formatDecimal, rankConjID}
	case FieldTpDst:
		return fieldSpec{"tp_dst", "", "NXM_OF_TCP_DST", 2, formatPort, 89}
	case FieldReg4:
		return fieldSpec{"reg4", "", "NXM_NX_REG4", 4, formatHex, rankReg + 4}
	case FieldCTMark:
		return fieldSpec{"ct_mark", "", "NXM_NX_CT_MARK", 4, formatHex, rankCT + 1}
	case FieldTpSrc:
		return fieldSpec{"tp_src", "", "NXM_OF_TCP_SRC", 2, formatPort, 88}
	case FieldIPFrag:
		return fieldSpec{"nw_frag", "", "NXM_NX_IP_FRAG", 1, formatFrag, 86}
	case FieldCTNwProto:
		return fieldSpec{"ct_nw_proto", "", "NXM_NX_CT_NW_PROTO", 1, formatDecimal, rankCT + 2}
	case FieldReg0, FieldReg1, FieldReg2, FieldReg3:
		n := int(f - FieldReg0)
		return fieldSpec{fmt.Sprintf("reg%d", n), "", fmt.Sprintf("NXM_NX_REG%d", n), 4, formatHex, rankReg + n}
	}
	panic(fmt.Sprintf("pipeline: unknown field %d", f))
}

// Name is the field's name in an ovs-ofctl match.
func (f Field) Name() string { return f.spec().name }

// setName is the field's name after "set_field:...->".
func (f Field) setName() string {
	if s := f.spec(); s.setAs != "" {
		return s.setAs
	}
	return f.Name()
}

// moveName is the field's full-width subfield in move syntax, e.g. NXM_OF_ETH_SRC[]; fields
// without an NXM name use their OVS name, which ovs-ofctl also accepts.
func (f Field) moveName() string {
	if s := f.spec(); s.nxm != "" {
		return s.nxm + "[]"
	}
	return f.Name() + "[]"
}

// formatValue prints value (and mask, unless it is all ones) the way ovs-ofctl does.
func (f Field) formatValue(value, mask []byte) string {
	s := f.spec()
	switch s.format {
	case formatMAC:
		return net.HardwareAddr(value).String()
	case formatIPv4, formatIPv6:
		return formatAddr(value, mask)
	case formatCTState:
		return formatCTFlags(CTFlags(beUint(value)), CTFlags(beUint(mask)))
	case formatHex:
		if isAllOnes(mask) {
			return hexC(beUint(value))
		}
		return hexC(beUint(value)) + "/" + hexC(beUint(mask))
	case formatFrag:
		return formatFragBits(value[0], mask[0])
	case formatPort:
		if isAllOnes(mask) {
			return fmt.Sprintf("%d", beUint(value))
		}
		return hexC(beUint(value)) + "/" + hexC(beUint(mask))
	default:
		return fmt.Sprintf("%d", beUint(value))
	}
}

// hexC prints v as C's "%#x" does, which OVS uses: 0x-prefixed, except zero, which is "0"
// (reg0=0/0x300).
func hexC(v uint64) string {
	if v == 0 {
		return "0"
	}
	return fmt.Sprintf("%#x", v)
}

func formatAddr(value, mask []byte) string {
	addr, _ := netip.AddrFromSlice(value)
	if isAllOnes(mask) {
		return addr.String()
	}
	return fmt.Sprintf("%s/%d", addr, prefixLen(mask))
}

// Value encodings: every field value is big-endian bytes of the field's width, like OVS's
// own mf_value, so matching, set_field and move are the same byte operations for all fields.

func uintValue(v uint64, width int) []byte {
	b := make([]byte, 8)
	binary.BigEndian.PutUint64(b, v)
	return b[8-width:]
}

func beUint(b []byte) uint64 {
	var v uint64
	for _, c := range b {
		v = v<<8 | uint64(c)
	}
	return v
}

func macValue(mac net.HardwareAddr) []byte { return append([]byte(nil), mac...) }

func addrValue(a netip.Addr) []byte { return a.AsSlice() }

func allOnes(width int) []byte {
	b := make([]byte, width)
	for i := range b {
		b[i] = 0xff
	}
	return b
}

func isAllOnes(mask []byte) bool {
	for _, c := range mask {
		if c != 0xff {
			return false
		}
	}
	return true
}

func prefixMask(bits, width int) []byte {
	b := make([]byte, width)
	for i := 0; i < bits; i++ {
		b[i/8] |= 0x80 >> (i % 8)
	}
	return b
}

func prefixLen(mask []byte) int {
	n := 0
	for _, c := range mask {
		for bit := byte(0x80); bit != 0 && c&bit != 0; bit >>= 1 {
			n++
		}
	}
	return n
}

// formatCTFlags prints ct_state the way OVS does: each masked flag as +name or -name, in
// bit order (new, est, rel, rpl, inv, trk).
func formatCTFlags(value, mask CTFlags) string {
	var b strings.Builder
	for flag := CTNew; flag <= CTDNAT; flag <<= 1 {
		if mask&flag == 0 {
			continue
		}
		if value&flag != 0 {
			b.WriteString("+")
		} else {
			b.WriteString("-")
		}
		b.WriteString(flag.name())
	}
	return b.String()
}

// IP fragment bits of nw_frag, as OVS holds them: any fragment, and a fragment after the
// first (which carries no L4 header).
const (
	FragAny   uint8 = 1
	FragLater uint8 = 2
)

// formatFragBits prints nw_frag the way OVS does: yes (any fragment), no, first, later,
// not_later.
func formatFragBits(value, mask uint8) string {
	switch {
	case mask&(FragAny|FragLater) == FragAny:
		if value&FragAny != 0 {
			return "yes"
		}
		return "no"
	case mask&(FragAny|FragLater) == FragLater:
		return "not_later"
	case value&FragLater != 0:
		return "later"
	case value&FragAny != 0:
		return "first"
	}
	return "no"
}
