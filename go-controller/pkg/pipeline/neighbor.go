package pipeline

import "net"

// ARP opcodes and ICMPv6 neighbour discovery types.
const (
	arpOpRequest uint16 = 1
	arpOpReply   uint16 = 2

	ndRouterSolicit   uint8 = 133
	ndRouterAdvert    uint8 = 134
	ndNeighborSolicit uint8 = 135
	ndNeighborAdvert  uint8 = 136
	ndRedirect        uint8 = 137

	ndOptionSourceLL uint8 = 1
	ndOptionTargetLL uint8 = 2
)

// arpReplyActions turn an ARP request into the reply "arp_tpa is at mac" and send it back
// out the port it came from. The requested address may be any address of a prefix, so it
// is swapped through NeighborScratchField rather than written as a constant.
func arpReplyActions(mac net.HardwareAddr) []Action {
	scratch := NeighborScratchField.field()
	return []Action{
		Move{Src: FieldEthSrc, Dst: FieldEthDst},
		SetEthSrc(mac),
		SetARPOp(arpOpReply),
		Move{Src: FieldARPSha, Dst: FieldARPTha},
		SetARPSha(mac),
		Move{Src: FieldARPTpa, Dst: scratch},
		Move{Src: FieldARPSpa, Dst: FieldARPTpa},
		Move{Src: scratch, Dst: FieldARPSpa},
		OutputInPort{},
	}
}

// solicitationMatch matches neighbour solicitations a responder may answer: well-formed
// (hop limit 255, code 0) and carrying a source link-layer option, which the reply reuses
// as its target link-layer option.
func solicitationMatch() Match {
	return MatchProtocol(ProtoICMPv6).TTL(255).ICMPv6Type(ndNeighborSolicit).ICMPv6Code(0).
		NDOptionsType(ndOptionSourceLL)
}

// advertiseActions turn a neighbour solicitation into the header of the advertisement
// "nd_target is at mac" and pass it to NDReply, which writes mac into the target
// link-layer option. OVS checks set_field prerequisites against a flow's match, and a
// match on an NS does not allow setting nd_tll: hence two tables.
func advertiseActions(mac net.HardwareAddr, flags uint32) []Action {
	return []Action{
		Move{Src: FieldEthSrc, Dst: FieldEthDst},
		SetEthSrc(mac),
		Move{Src: FieldIPv6Src, Dst: FieldIPv6Dst},
		Move{Src: FieldNDTarget, Dst: FieldIPv6Src},
		SetICMPv6Type(ndNeighborAdvert),
		SetNDOptionsType(ndOptionTargetLL),
		SetNDReserved(flags),
		Goto(NDReply),
	}
}

// advertisementMatch matches, in NDReply, the advertisements advertiseActions built.
func advertisementMatch() Match {
	return MatchProtocol(ProtoICMPv6).ICMPv6Type(ndNeighborAdvert)
}

// replyActions complete an advertisement with its target link-layer address and send it
// back out the port the solicitation came from.
func replyActions(mac net.HardwareAddr) []Action {
	return []Action{SetNDTLL(mac), OutputInPort{}}
}
