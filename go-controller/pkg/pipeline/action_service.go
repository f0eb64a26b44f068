package pipeline

import (
	"fmt"
	"strconv"
)

// GroupOutput hands the packet to an OpenFlow group: a select group picks one bucket (a
// Service endpoint) by a hash of the packet's addresses and ports.
type GroupOutput struct{ ID uint32 }

func (a GroupOutput) String() string { return "group:" + strconv.FormatUint(uint64(a.ID), 10) }

// Resubmit looks the packet up in Table and runs that flow's actions, then continues with
// the actions after it (unless the resubmitted flow recirculated the packet).
type Resubmit struct{ Table Table }

func (a Resubmit) String() string { return fmt.Sprintf("resubmit(,%d)", a.Table.ID) }

// LearnAffinity learns a flow in Table that remembers a client's Service endpoint:
// matching the packet's source and destination address, protocol and destination port, it
// loads the packet's EndpointKey and sets AffinityHit, for IdleTimeout seconds of
// inactivity (sessionAffinity ClientIP's timeoutSeconds).
type LearnAffinity struct {
	Table       Table
	Priority    uint16
	IdleTimeout uint16
	IPv6        bool
	IPProto     uint8
}

func (a LearnAffinity) String() string {
	src, dst := learnAddrFields(a.IPv6)
	port := "NXM_OF_TCP_DST[]"
	switch a.IPProto {
	case IPProtoUDP:
		port = "NXM_OF_UDP_DST[]"
	case IPProtoSCTP:
		port = "OXM_OF_SCTP_DST[]"
	}
	hit, _ := AffinityHitField.Mark(1).bits()
	return learnAction(a.Table, a.IdleTimeout, a.Priority, affinityCookie(), a.IPv6, a.IPProto, src, dst, port,
		"load:"+EndpointKeyField.subfield()+"->"+EndpointKeyField.subfield(),
		fmt.Sprintf("load:%#x->%s", hit>>AffinityHitField.Start, bitSubfield(AffinityHitField)))
}

// bitSubfield renders a register range the way OVS prints it inside learn: a single bit
// as NXM_NX_REG0[4].
func bitSubfield(f RegField) string {
	if f.Start == f.End {
		return fmt.Sprintf("%s[%d]", f.field().spec().nxm, f.Start)
	}
	return f.subfield()
}
