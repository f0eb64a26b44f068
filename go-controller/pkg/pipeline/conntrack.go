package pipeline

// CTZone is the one conntrack zone of br-int. Pod, gateway and tunnel traffic share
// it, so a connection committed in one direction is +est for its replies whatever port
// they arrive on. 65520 (0xfff0) keeps clear of zone 0 and of low zones other tools use.
const CTZone uint16 = 65520

// CTFlags are ct_state bits, as OVS numbers them.
type CTFlags uint32

// ct_state flags.
const (
	CTNew CTFlags = 1 << iota
	CTEstablished
	CTRelated
	CTReply
	CTInvalid
	CTTracked
	CTSNAT // the connection's source is translated
	CTDNAT // the connection's destination is translated
)

func (f CTFlags) name() string {
	switch f {
	case CTNew:
		return "new"
	case CTEstablished:
		return "est"
	case CTRelated:
		return "rel"
	case CTReply:
		return "rpl"
	case CTInvalid:
		return "inv"
	case CTTracked:
		return "trk"
	case CTSNAT:
		return "snat"
	case CTDNAT:
		return "dnat"
	}
	return "?"
}

// String prints the set flags in OVS's +flag syntax, e.g. "+new+trk".
func (f CTFlags) String() string { return formatCTFlags(f, f) }
