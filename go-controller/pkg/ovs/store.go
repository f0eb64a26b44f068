package ovs

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
)

// Datapath types of a bridge.
const (
	// DatapathSystem is the kernel datapath (needs the openvswitch kernel module).
	DatapathSystem = "system"
	// DatapathNetdev is the userspace datapath of ovs-vswitchd.
	DatapathNetdev = "netdev"
)

// FailModeSecure makes a bridge forward nothing it has no flow for, even when no
// controller is connected: kovs owns every flow of br-int.
const FailModeSecure = "secure"

// Interface types kovs creates.
const (
	// PortTypeSystem is an existing network device (a pod's veth host end).
	PortTypeSystem = ""
	// PortTypeInternal is a device ovs-vswitchd creates (the gateway port).
	PortTypeInternal = "internal"
	// PortTypeGeneve is a Geneve tunnel port.
	PortTypeGeneve = "geneve"
)

// OfportLocal is the OpenFlow port number of a bridge's own internal port.
const OfportLocal = 65534

// ErrNotFound matches, through errors.Is, errors about a bridge or port that does
// not exist.
var ErrNotFound = errors.New("not found")

// BridgeSpec is the desired state of the bridge columns kovs owns. EnsureBridge
// sets DatapathType, FailMode and Protocols as given and sets the keys of
// OtherConfig and ExternalIDs, leaving keys it was not given alone.
type BridgeSpec struct {
	Name         string
	DatapathType string   // DatapathSystem or DatapathNetdev
	FailMode     string   // FailModeSecure, or "" for the OVS default (standalone)
	Protocols    []string // e.g. OpenFlow13, OpenFlow15; ovs-ofctl uses -O OpenFlow15
	OtherConfig  map[string]string
	ExternalIDs  map[string]string
}

// PortSpec is the desired state of a port and its single interface. EnsurePort
// sets Type, Options, OfportRequest, MTURequest and MAC as given (zero values
// clear them) and sets the keys of ExternalIDs on both the Port and the
// Interface, leaving other keys alone. The Interface's external_ids are the
// canonical copy (the one Ports and FindPorts read), as in OVN.
type PortSpec struct {
	Name          string
	Type          string            // PortTypeSystem, PortTypeInternal or PortTypeGeneve
	Options       map[string]string // e.g. remote_ip=flow, key=flow for Geneve
	ExternalIDs   map[string]string
	OfportRequest int    // 0: let ovs-vswitchd choose
	MTURequest    int    // 0: the OVS default
	MAC           string // requested MAC of an internal interface, "" for any
}

// PortInfo is a port as the database shows it.
type PortInfo struct {
	Name        string
	Type        string
	Ofport      int               // 0 before ovs-vswitchd assigned one, -1 if it failed
	MAC         string            // the MAC in use (mac_in_use), or the requested one
	ExternalIDs map[string]string // the Interface's (the Port's if the Interface has none)
	Error       string            // the Interface error column: why ovs-vswitchd could not create it
}

// BridgeStore manages bridges in the Open_vSwitch database.
type BridgeStore interface {
	// EnsureBridge creates the bridge (with its internal port, as ovs-vsctl
	// add-br does) or updates the columns the spec owns, and returns once
	// ovs-vswitchd has applied it.
	EnsureBridge(ctx context.Context, spec BridgeSpec) error
	// DeleteBridge removes the bridge and its ports, and returns once ovs-vswitchd has
	// applied that; a missing bridge is success.
	DeleteBridge(ctx context.Context, name string) error
	// LimitFlowTables bounds OpenFlow tables of the bridge (its Flow_Table rows) and
	// returns once ovs-vswitchd has applied the limits; tables it is not given are left
	// alone.
	LimitFlowTables(ctx context.Context, bridge string, limits map[int]FlowTableLimit) error
	// SetBridgeExternalIDs sets keys of the bridge's external_ids, leaving other keys
	// alone, and returns once the database committed them.
	SetBridgeExternalIDs(ctx context.Context, bridge string, ids map[string]string) error
	// BridgeExternalIDs returns a copy of the bridge's external_ids.
	BridgeExternalIDs(ctx context.Context, bridge string) (map[string]string, error)
}

// FlowTableLimit bounds one OpenFlow table. A full table refuses new flows, or, with
// Evict, makes room by evicting the flow that expires soonest (only flows with a timeout
// are evicted) from the largest group of flows that agree on Groups (field names as OVS
// spells them, e.g. NXM_OF_IP_DST[]): whoever fills the table loses its own flows first.
type FlowTableLimit struct {
	FlowLimit int
	Evict     bool
	Groups    []string
}

// Validate reports what is wrong with the limit.
func (l FlowTableLimit) Validate() error {
	if l.FlowLimit < 1 {
		return fmt.Errorf("flow limit %d: use at least 1", l.FlowLimit)
	}
	for _, g := range l.Groups {
		if g == "" || strings.ContainsAny(g, " ,") {
			return fmt.Errorf("eviction group field %q: a field or subfield such as NXM_OF_IP_DST[]", g)
		}
	}
	return nil
}

// PortStore manages the ports of bridges.
type PortStore interface {
	// EnsurePort creates or updates the port and returns the OpenFlow port
	// number ovs-vswitchd assigned to it.
	EnsurePort(ctx context.Context, bridge string, spec PortSpec) (ofport int, err error)
	// DeletePort removes the port from the bridge; a missing port is success.
	// The bridge's own port is refused: delete the bridge instead.
	DeletePort(ctx context.Context, bridge, name string) error
	// Ports lists the ports of a bridge, its own internal port included.
	Ports(ctx context.Context, bridge string) ([]PortInfo, error)
	// FindPorts lists the ports of a bridge whose external_ids map key to value.
	FindPorts(ctx context.Context, bridge, key, value string) ([]PortInfo, error)
}

// SwitchConfig manages the single Open_vSwitch row.
type SwitchConfig interface {
	// SetOtherConfig sets keys of Open_vSwitch other_config, e.g. flow-restore-wait.
	SetOtherConfig(ctx context.Context, config map[string]string) error
	// RemoveOtherConfig removes keys of Open_vSwitch other_config.
	RemoveOtherConfig(ctx context.Context, keys ...string) error
	// SetExternalIDs sets keys of Open_vSwitch external_ids.
	SetExternalIDs(ctx context.Context, ids map[string]string) error
	// OtherConfig returns a copy of Open_vSwitch other_config.
	OtherConfig(ctx context.Context) (map[string]string, error)
	// DatapathTypes lists the datapath types ovs-vswitchd supports.
	DatapathTypes(ctx context.Context) ([]string, error)
}

// Store is everything the agent needs from the Open_vSwitch database. *OVSDB
// implements it, and so does *ovsfake.OVSDB (package ovs/ovsfake) for unit tests.
type Store interface {
	BridgeStore
	PortStore
	SwitchConfig
	Close()
}

// Validate reports what is wrong with the spec, if anything.
func (s BridgeSpec) Validate() error {
	if s.Name == "" {
		return errors.New("bridge name is empty")
	}
	switch s.DatapathType {
	case DatapathSystem, DatapathNetdev:
	default:
		return fmt.Errorf("bridge %s: datapath type %q is neither %q nor %q",
			s.Name, s.DatapathType, DatapathSystem, DatapathNetdev)
	}
	if s.FailMode != "" && s.FailMode != FailModeSecure && s.FailMode != "standalone" {
		return fmt.Errorf("bridge %s: unknown fail mode %q", s.Name, s.FailMode)
	}
	for _, p := range s.Protocols {
		if !strings.HasPrefix(p, "OpenFlow1") {
			return fmt.Errorf("bridge %s: unknown OpenFlow protocol %q", s.Name, p)
		}
	}
	return nil
}

// Validate reports what is wrong with the spec, if anything.
func (s PortSpec) Validate() error {
	if s.Name == "" {
		return errors.New("port name is empty")
	}
	if s.OfportRequest < 0 || s.OfportRequest > 65279 {
		return fmt.Errorf("port %s: ofport request %d is outside 1..65279", s.Name, s.OfportRequest)
	}
	if s.MTURequest < 0 {
		return fmt.Errorf("port %s: negative MTU request %d", s.Name, s.MTURequest)
	}
	if s.MAC != "" {
		if _, err := net.ParseMAC(s.MAC); err != nil {
			return fmt.Errorf("port %s: %w", s.Name, err)
		}
	}
	return nil
}

// hasExternalID reports whether ids maps key to value.
func hasExternalID(ids map[string]string, key, value string) bool {
	v, ok := ids[key]
	return ok && v == value
}
