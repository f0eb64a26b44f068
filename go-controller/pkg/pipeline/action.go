package pipeline

import (
	"fmt"
	"net"
	"net/netip"
	"strconv"

	"github.com/kovs-net/kovs/go-controller/pkg/ovs"
)

// Action is one OpenFlow action. Each renders itself in ovs-ofctl syntax; the tracer
// executes them.
type Action interface {
	String() string
}

// GotoTable continues processing in a later table.
type GotoTable struct{ Table Table }

func (a GotoTable) String() string { return fmt.Sprintf("goto_table:%d", a.Table.ID) }

// Goto continues processing in table t.
func Goto(t Table) GotoTable { return GotoTable{Table: t} }

// Meter passes the packet through an OpenFlow meter, which drops what exceeds its rate.
type Meter struct{ ID uint32 }

func (a Meter) String() string { return fmt.Sprintf("meter:%d", a.ID) }

// OutputPort sends the packet out an ofport (never back out its ingress port).
type OutputPort struct{ Port uint32 }

func (a OutputPort) String() string { return fmt.Sprintf("output:%d", a.Port) }

// OutputInPort sends the packet back out the port it came in on: ARP and ND replies.
type OutputInPort struct{}

func (OutputInPort) String() string { return "IN_PORT" }

// OutputReg sends the packet out the ofport held in a register range.
type OutputReg struct{ Field RegField }

func (a OutputReg) String() string { return "output:" + a.Field.subfield() }

// SetField writes value (under mask) into a field.
type SetField struct {
	Field Field
	Value []byte
	Mask  []byte
}

func (a SetField) String() string {
	return fmt.Sprintf("set_field:%s->%s", a.Field.formatValue(a.Value, a.Mask), a.Field.setName())
}

func setExact(f Field, value []byte) SetField {
	return SetField{Field: f, Value: value, Mask: allOnes(len(value))}
}

// SetEthSrc rewrites the Ethernet source.
func SetEthSrc(mac net.HardwareAddr) SetField { return setExact(FieldEthSrc, macValue(mac)) }

// SetEthDst rewrites the Ethernet destination.
func SetEthDst(mac net.HardwareAddr) SetField { return setExact(FieldEthDst, macValue(mac)) }

// SetTunDst sets the tunnel's outer destination: tun_dst for IPv4, tun_ipv6_dst for IPv6.
func SetTunDst(a netip.Addr) SetField {
	if a.Is6() {
		return setExact(FieldTunIPv6Dst, addrValue(a))
	}
	return setExact(FieldTunDst, addrValue(a))
}

// SetTunID sets the tunnel key (the Geneve VNI).
func SetTunID(id uint64) SetField { return setExact(FieldTunID, uintValue(id, 8)) }

// SetARPOp sets the ARP opcode.
func SetARPOp(op uint16) SetField { return setExact(FieldARPOp, uintValue(uint64(op), 2)) }

// SetARPSha sets the ARP sender hardware address.
func SetARPSha(mac net.HardwareAddr) SetField { return setExact(FieldARPSha, macValue(mac)) }

// SetICMPv6Type sets the ICMPv6 type.
func SetICMPv6Type(t uint8) SetField { return setExact(FieldICMPv6Type, []byte{t}) }

// SetNDReserved sets the 32-bit word after an ND message's checksum: a neighbour
// advertisement's R, S and O flags.
func SetNDReserved(v uint32) SetField { return setExact(FieldNDReserved, uintValue(uint64(v), 4)) }

// SetNDOptionsType sets the type of the first ND option (2: target link-layer address).
func SetNDOptionsType(t uint8) SetField { return setExact(FieldNDOptionsType, []byte{t}) }

// SetNDTLL sets the target link-layer address option of a neighbour advertisement.
func SetNDTLL(mac net.HardwareAddr) SetField { return setExact(FieldNDTLL, macValue(mac)) }

// LoadReg writes a register range value, leaving the register's other bits alone.
func LoadReg(mark RegMark) SetField {
	value, mask := mark.bits()
	return SetField{Field: mark.Field.field(), Value: uintValue(uint64(value), 4), Mask: uintValue(uint64(mask), 4)}
}

// Move copies one whole field into another of the same width.
type Move struct{ Src, Dst Field }

func (a Move) String() string { return fmt.Sprintf("move:%s->%s", a.Src.moveName(), a.Dst.moveName()) }

// DecTTL decrements the IPv4 TTL or IPv6 hop limit; a packet whose TTL would reach zero is
// dropped (it would go to a controller, and br-int has none).
type DecTTL struct{}

func (DecTTL) String() string { return "dec_ttl" }

// CT sends the packet through conntrack in Zone. Commit records the connection. Recirculate
// resumes the pipeline in Table with ct_state filled in; it ends the action list, so it
// comes last. NAT applies the connection's existing NAT (and un-NATs replies).
type CT struct {
	Commit      bool
	Zone        uint16
	Recirculate bool
	Table       Table
	NAT         bool
	// NATDst (with Commit) translates the connection's destination to this address and,
	// when its port is not 0, port: a Service's endpoint.
	NATDst netip.AddrPort
	// NATSrc (with Commit) translates the connection's source to this address.
	NATSrc netip.Addr
	// Mark (with Commit) sets the ct_mark bits of MarkMask to Mark.
	Mark, MarkMask uint32
}

// String is the action as ovs.CT renders it.
func (a CT) String() string {
	return ovs.CT{Commit: a.Commit, Zone: a.Zone, Recirculate: a.Recirculate, Table: a.Table.ID, NAT: a.NAT,
		NATDst: a.NATDst, NATSrc: a.NATSrc, Mark: a.Mark, MarkMask: a.MarkMask}.String()
}

// Drop discards the packet.
type Drop struct{}

func (Drop) String() string { return "drop" }

// Conjunction makes its flow clause Clause of the NClauses clauses of conjunctive match
// ID: when a packet matches one flow of every clause, OVS looks the table up again with
// conj_id=ID. A flow with conjunction actions has no other action.
type Conjunction struct {
	ID       uint32
	Clause   uint8
	NClauses uint8
}

func (a Conjunction) String() string {
	// Without fmt: a clause flow shared by a thousand rules renders a thousand of these.
	return "conjunction(" + strconv.FormatUint(uint64(a.ID), 10) + "," + strconv.Itoa(int(a.Clause)) + "/" +
		strconv.Itoa(int(a.NClauses)) + ")"
}
