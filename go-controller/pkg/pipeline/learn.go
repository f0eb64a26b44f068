package pipeline

import (
	"net/netip"

	"github.com/kovs-net/kovs/go-controller/pkg/ovs"
)

// learnAction is a learn action (ovs.Learn, which renders it) of a flow in table with the
// idle timeout, priority and cookie (none when 0), matching the family's eth_type and
// ipProto, then specs (its other match fields and its actions).
func learnAction(table Table, idle, priority uint16, cookie Cookie, ipv6 bool, ipProto uint8, specs ...string) string {
	ethType := EthTypeIPv4
	if ipv6 {
		ethType = EthTypeIPv6
	}
	return ovs.Learn{Table: table.ID, IdleTimeout: idle, Priority: priority, Cookie: uint64(cookie),
		EthType: ethType, IPProto: ipProto, Specs: specs}.String()
}

// learnAddrFields names a family's source and destination address fields as learn specs
// name them.
func learnAddrFields(ipv6 bool) (src, dst string) {
	if ipv6 {
		return "NXM_NX_IPV6_SRC[]", "NXM_NX_IPV6_DST[]"
	}
	return "NXM_OF_IP_SRC[]", "NXM_OF_IP_DST[]"
}

// learnSCTPReverse are the specs of a learned flow that matches the replies of the SCTP
// packet being processed: addresses and ports swapped.
func learnSCTPReverse(ipv6 bool) []string {
	src, dst := learnAddrFields(ipv6)
	return []string{src + "=" + dst, dst + "=" + src,
		"OXM_OF_SCTP_SRC[]=OXM_OF_SCTP_DST[]", "OXM_OF_SCTP_DST[]=OXM_OF_SCTP_SRC[]"}
}

// sctpReplyMatch is the match learnSCTPReverse learns from pkt.
func sctpReplyMatch(pkt Packet, ipv6 bool) Match {
	return sctpMatch(netip.AddrPortFrom(pkt.IPDst, pkt.DstPort), netip.AddrPortFrom(pkt.IPSrc, pkt.SrcPort))
}

// sctpMatch matches the SCTP packets from src to dst (addresses and ports), as the flows
// learned from SCTP packets do.
func sctpMatch(src, dst netip.AddrPort) Match {
	proto, _ := TransportProtocol(IPProtoSCTP, src.Addr().Is6())
	return MatchProtocol(proto).IPSrc(host(src.Addr())).IPDst(host(dst.Addr())).
		with(FieldTpSrc, uintValue(uint64(src.Port()), 2), allOnes(2)).TpDst(dst.Port(), 0xffff)
}

// LearnedTable is a table whose flows the switch learns (any pod's traffic adds them),
// and the fields that tell whose traffic learned a flow: when the table is full, the
// switch evicts from the largest group of flows agreeing on them, so a pod that floods
// the table loses its own flows first (OVS Flow_Table groups).
type LearnedTable struct {
	Table   Table
	GroupBy []string
}

// LearnedTables are the tables of learned flows, which the agent bounds in OVS
// (Flow_Table flow_limit, overflow_policy evict). Grouped by the address of the side
// that opens associations or connections: the initiator is the learned reply's
// destination (SCTPReply) and un-NAT flow's (SCTPUnNAT), the pinned or affine client's
// source (SCTPPin, ServiceAffinity).
func LearnedTables() []LearnedTable {
	dst := []string{"NXM_OF_IP_DST[]", "NXM_NX_IPV6_DST[]"}
	src := []string{"NXM_OF_IP_SRC[]", "NXM_NX_IPV6_SRC[]"}
	return []LearnedTable{
		{Table: SCTPReply, GroupBy: dst},
		{Table: ServiceAffinity, GroupBy: src},
		{Table: SCTPUnNAT, GroupBy: dst},
		{Table: SCTPPin, GroupBy: src},
	}
}
