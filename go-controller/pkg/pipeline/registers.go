package pipeline

import "fmt"

// Register map of br-int. Every register bit kovs uses is declared in this file and
// nowhere else; README (ovs-flows/README.md) repeats this map.
//
//	reg0[0..3]   PortClass        class of the ingress port, loaded by Classifier:
//	                              1 pod, 2 tunnel, 3 gateway (0: never classified)
//	reg0[4]      AffinityHit      ServiceAffinity found the client's learned endpoint
//	reg0[5..7]   free
//	reg0[8..9]   SCTPState        loaded for SCTP in ConntrackState: 0 not SCTP (conntrack
//	                              state stands), 1 SCTP (policy checks every packet),
//	                              2 SCTP reply of an association policy allowed (a learned
//	                              SCTPReply flow matched)
//	reg0[10..15] free
//	reg0[16..31] EgressID         the Egress whose IP a packet leaves with (egress stage):
//	                              loaded in Classifier (tunnel key) or L3Forwarding (a
//	                              selected local pod); ConntrackCommit translates to its IP
//	reg1[0..31]  OutPort          ofport chosen by L3Forwarding; Output sends the packet
//	                              there and IngressPolicy will select the destination
//	                              pod's rules by it
//	reg2[0..31]  NeighborScratch  ARPResponder parks the requested IPv4 address here
//	                              while it swaps arp_spa and arp_tpa; meaningless elsewhere
//	reg3[0..31]  EndpointKey      the Service endpoint a group bucket (or a learned affinity
//	                              flow) chose; EndpointDNAT translates to it
//	reg4[0..31]  ServiceGroup     the group of the Service port ServiceLB matched
//
// No register copies in_port: the OpenFlow in_port field survives goto_table and ct()
// recirculation, so every table can match it directly.

// RegField is a bit range of an NXM register, reg<Reg>[<Start>..<End>], inclusive.
type RegField struct {
	Name  string
	Reg   uint8
	Start uint8
	End   uint8
}

// Register fields, declared once (never written after initialisation).
var (
	PortClassField       = RegField{Name: "PortClass", Reg: 0, Start: 0, End: 3}
	OutPortField         = RegField{Name: "OutPort", Reg: 1, Start: 0, End: 31}
	NeighborScratchField = RegField{Name: "NeighborScratch", Reg: 2, Start: 0, End: 31}
	AffinityHitField     = RegField{Name: "AffinityHit", Reg: 0, Start: 4, End: 4}
	EndpointKeyField     = RegField{Name: "EndpointKey", Reg: 3, Start: 0, End: 31}
	ServiceGroupField    = RegField{Name: "ServiceGroup", Reg: 4, Start: 0, End: 31}
	SCTPStateField       = RegField{Name: "SCTPState", Reg: 0, Start: 8, End: 9}
	EgressIDField        = RegField{Name: "EgressID", Reg: 0, Start: 16, End: 31}
)

// field is the whole register the range lives in.
func (f RegField) field() Field {
	if f.Reg == 4 {
		return FieldReg4
	}
	return FieldReg0 + Field(f.Reg)
}

// mask is the range's bits in register position.
func (f RegField) mask() uint32 {
	width := uint(f.End-f.Start) + 1
	if width >= 32 {
		return ^uint32(0)
	}
	return (uint32(1)<<width - 1) << f.Start
}

// subfield renders the range in NXM syntax: NXM_NX_REG1[] or NXM_NX_REG0[0..3].
func (f RegField) subfield() string {
	nxm := f.field().spec().nxm
	if f.mask() == ^uint32(0) {
		return nxm + "[]"
	}
	return fmt.Sprintf("%s[%d..%d]", nxm, f.Start, f.End)
}

// String names the range for people: "PortClass(reg0[0..3])".
func (f RegField) String() string {
	return fmt.Sprintf("%s(reg%d[%d..%d])", f.Name, f.Reg, f.Start, f.End)
}

// Mark is the value v of this range, for matching or loading.
func (f RegField) Mark(v uint32) RegMark { return RegMark{Field: f, Value: v} }

// RegMark is a value of a register range.
type RegMark struct {
	Field RegField
	Value uint32
}

// bits returns the mark's value and mask in register position.
func (m RegMark) bits() (value, mask uint32) {
	mask = m.Field.mask()
	return (m.Value << m.Field.Start) & mask, mask
}

// PortClass is the class of a packet's ingress port.
type PortClass uint32

// Port classes, as loaded into PortClassField.
const (
	PortClassPod     PortClass = 1
	PortClassTunnel  PortClass = 2
	PortClassGateway PortClass = 3
)

// Mark is the class as a PortClassField value.
func (c PortClass) Mark() RegMark { return PortClassField.Mark(uint32(c)) }

func (c PortClass) String() string {
	switch c {
	case PortClassPod:
		return "pod"
	case PortClassTunnel:
		return "tunnel"
	case PortClassGateway:
		return "gateway"
	}
	return fmt.Sprintf("class(%d)", uint32(c))
}

// SCTPState is what decides for an SCTP packet (see flows_sctp.go): ovs-vswitchd's
// userspace conntrack tracks SCTP by addresses only, so its state is never trusted for
// SCTP.
type SCTPState uint32

// SCTP states, as loaded into SCTPStateField.
const (
	SCTPStateConntrack SCTPState = 0 // not SCTP: conntrack state stands
	SCTPStatePolicy    SCTPState = 1 // SCTP: policy checks every packet
	SCTPStateReply     SCTPState = 2 // SCTP reply of an allowed association: skips policy
)

// Mark is the state as an SCTPStateField value.
func (s SCTPState) Mark() RegMark { return SCTPStateField.Mark(uint32(s)) }
