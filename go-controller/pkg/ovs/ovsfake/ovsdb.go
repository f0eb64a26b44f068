package ovsfake

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"

	"github.com/kovs-net/kovs/go-controller/pkg/ovs"
)

// OVSDB is an in-memory Store for unit tests of the packages above pkg/ovs.
// It behaves as OVSDB and ovs-vswitchd do together: bridges get their internal
// port at ofport 65534, ports get the requested ofport or the lowest free one,
// maps merge as EnsureBridge and EnsurePort document, and a port marked with
// FailPort gets ofport -1 and an error, as a missing device does. It is safe
// for concurrent use.
type OVSDB struct {
	mu            sync.Mutex
	bridges       map[string]*fakeBridge
	otherConfig   map[string]string
	externalIDs   map[string]string
	datapathTypes []string
	portErrors    map[string]string
	closed        bool
}

type fakeBridge struct {
	spec  ovs.BridgeSpec
	ports map[string]*ovs.PortInfo
	specs map[string]ovs.PortSpec
	// flowTables are the bridge's table limits.
	flowTables map[int]ovs.FlowTableLimit
}

var _ ovs.Store = (*OVSDB)(nil)

// NewOVSDB returns an empty database whose ovs-vswitchd supports the
// netdev and system datapaths.
func NewOVSDB() *OVSDB {
	return &OVSDB{
		bridges:       map[string]*fakeBridge{},
		otherConfig:   map[string]string{},
		externalIDs:   map[string]string{},
		datapathTypes: []string{ovs.DatapathNetdev, ovs.DatapathSystem},
		portErrors:    map[string]string{},
	}
}

// SetDatapathTypes sets what DatapathTypes returns.
func (f *OVSDB) SetDatapathTypes(types ...string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.datapathTypes = slices.Clone(types)
}

// FailPort makes ovs-vswitchd fail to set up interfaces named name, reporting
// msg (e.g. "could not open network device x (No such device)"). An empty msg
// lifts it.
func (f *OVSDB) FailPort(name, msg string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if msg == "" {
		delete(f.portErrors, name)
		return
	}
	f.portErrors[name] = msg
}

// Bridge returns the current state of a bridge's owned columns.
func (f *OVSDB) Bridge(name string) (ovs.BridgeSpec, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	b, ok := f.bridges[name]
	if !ok {
		return ovs.BridgeSpec{}, false
	}
	return cloneBridgeSpec(b.spec), true
}

// Port returns the current spec of a port on a bridge, as EnsurePort left it
// (external IDs merged).
func (f *OVSDB) Port(bridge, name string) (ovs.PortSpec, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	b, ok := f.bridges[bridge]
	if !ok {
		return ovs.PortSpec{}, false
	}
	spec, ok := b.specs[name]
	return clonePortSpec(spec), ok
}

// ExternalIDs returns a copy of Open_vSwitch external_ids.
func (f *OVSDB) ExternalIDs() map[string]string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return maps.Clone(f.externalIDs)
}

// EnsureBridge implements BridgeStore.
func (f *OVSDB) EnsureBridge(ctx context.Context, spec ovs.BridgeSpec) error {
	if err := spec.Validate(); err != nil {
		return fmt.Errorf("ensure bridge: %w", err)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.usable(ctx); err != nil {
		return fmt.Errorf("ensure bridge %s: %w", spec.Name, err)
	}
	b, ok := f.bridges[spec.Name]
	if !ok {
		local := &ovs.PortInfo{Name: spec.Name, Type: ovs.PortTypeInternal, Ofport: ovs.OfportLocal, MAC: fakeMAC(ovs.OfportLocal)}
		b = &fakeBridge{
			spec:  ovs.BridgeSpec{Name: spec.Name},
			ports: map[string]*ovs.PortInfo{spec.Name: local},
			specs: map[string]ovs.PortSpec{spec.Name: {Name: spec.Name, Type: ovs.PortTypeInternal}},
		}
		f.bridges[spec.Name] = b
	}
	b.spec.DatapathType, b.spec.FailMode = spec.DatapathType, spec.FailMode
	b.spec.Protocols = slices.Clone(spec.Protocols)
	b.spec.OtherConfig = mergeKeys(b.spec.OtherConfig, spec.OtherConfig)
	b.spec.ExternalIDs = mergeKeys(b.spec.ExternalIDs, spec.ExternalIDs)
	return nil
}

// SetBridgeExternalIDs implements BridgeStore.
func (f *OVSDB) SetBridgeExternalIDs(ctx context.Context, bridge string, ids map[string]string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.usable(ctx); err != nil {
		return fmt.Errorf("set external_ids of bridge %s: %w", bridge, err)
	}
	b, ok := f.bridges[bridge]
	if !ok {
		return fmt.Errorf("set external_ids of bridge %s: %w", bridge, ovs.ErrNotFound)
	}
	b.spec.ExternalIDs = mergeKeys(b.spec.ExternalIDs, ids)
	return nil
}

// BridgeExternalIDs implements BridgeStore.
func (f *OVSDB) BridgeExternalIDs(ctx context.Context, bridge string) (map[string]string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.usable(ctx); err != nil {
		return nil, err
	}
	b, ok := f.bridges[bridge]
	if !ok {
		return nil, fmt.Errorf("bridge %s: %w", bridge, ovs.ErrNotFound)
	}
	return maps.Clone(b.spec.ExternalIDs), nil
}

// LimitFlowTables implements BridgeStore.
func (f *OVSDB) LimitFlowTables(ctx context.Context, bridge string, limits map[int]ovs.FlowTableLimit) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.usable(ctx); err != nil {
		return fmt.Errorf("limit flow tables of bridge %s: %w", bridge, err)
	}
	b, ok := f.bridges[bridge]
	if !ok {
		return fmt.Errorf("limit flow tables of bridge %s: %w", bridge, ovs.ErrNotFound)
	}
	for table, l := range limits {
		if err := l.Validate(); err != nil {
			return fmt.Errorf("limit flow tables of bridge %s: table %d: %w", bridge, table, err)
		}
		if b.flowTables == nil {
			b.flowTables = map[int]ovs.FlowTableLimit{}
		}
		l.Groups = slices.Clone(l.Groups)
		b.flowTables[table] = l
	}
	return nil
}

// FlowTableLimits returns the bridge's table limits (LimitFlowTables).
func (f *OVSDB) FlowTableLimits(bridge string) map[int]ovs.FlowTableLimit {
	f.mu.Lock()
	defer f.mu.Unlock()
	if b, ok := f.bridges[bridge]; ok {
		return maps.Clone(b.flowTables)
	}
	return nil
}

// DeleteBridge implements BridgeStore.
func (f *OVSDB) DeleteBridge(ctx context.Context, name string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.usable(ctx); err != nil {
		return fmt.Errorf("delete bridge %s: %w", name, err)
	}
	delete(f.bridges, name)
	return nil
}

// EnsurePort implements PortStore.
func (f *OVSDB) EnsurePort(ctx context.Context, bridge string, spec ovs.PortSpec) (int, error) {
	if err := spec.Validate(); err != nil {
		return 0, fmt.Errorf("ensure port on bridge %s: %w", bridge, err)
	}
	what := fmt.Sprintf("ensure port %s on bridge %s", spec.Name, bridge)
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.usable(ctx); err != nil {
		return 0, fmt.Errorf("%s: %w", what, err)
	}
	b, ok := f.bridges[bridge]
	if !ok {
		return 0, fmt.Errorf("%s: bridge %s: %w", what, bridge, ovs.ErrNotFound)
	}
	if other := f.bridgeOfPort(spec.Name); other != "" && other != bridge {
		return 0, fmt.Errorf("%s: port %s exists on another bridge", what, spec.Name)
	}
	info, err := b.ensurePort(spec, f.portErrors[spec.Name])
	if err != nil {
		return 0, fmt.Errorf("%s: %w", what, err)
	}
	return info.Ofport, nil
}

// ensurePort records the port and assigns its ofport, as ovs-vswitchd would.
// The MAC is the requested one or derived from the ofport.
func (b *fakeBridge) ensurePort(spec ovs.PortSpec, failure string) (*ovs.PortInfo, error) {
	merged := clonePortSpec(spec)
	merged.ExternalIDs = mergeKeys(b.specs[spec.Name].ExternalIDs, spec.ExternalIDs)
	b.specs[spec.Name] = merged
	info := b.ports[spec.Name]
	if info == nil {
		info = &ovs.PortInfo{Name: spec.Name}
		b.ports[spec.Name] = info
	}
	info.Type, info.ExternalIDs, info.Error = spec.Type, maps.Clone(merged.ExternalIDs), failure
	if failure != "" {
		info.Ofport = -1
		return nil, fmt.Errorf("ovs-vswitchd could not set up interface %s: %s", spec.Name, failure)
	}
	switch {
	case spec.OfportRequest > 0 && b.ofportUser(spec.OfportRequest, spec.Name) != "":
		if info.Ofport <= 0 {
			info.Ofport = b.freeOfport()
		}
		return nil, fmt.Errorf("ovs-vswitchd assigned ofport %d, not the requested %d (is it taken by another port?)",
			info.Ofport, spec.OfportRequest)
	case spec.OfportRequest > 0:
		info.Ofport = spec.OfportRequest
	case info.Ofport <= 0:
		info.Ofport = b.freeOfport()
	}
	info.MAC = cmp.Or(spec.MAC, fakeMAC(info.Ofport))
	return info, nil
}

// ofportUser names the port other than except that holds ofport, or "".
func (b *fakeBridge) ofportUser(ofport int, except string) string {
	for name, p := range b.ports {
		if name != except && p.Ofport == ofport {
			return name
		}
	}
	return ""
}

// freeOfport is the lowest ofport no port of the bridge holds.
func (b *fakeBridge) freeOfport() int {
	for n := 1; ; n++ {
		if b.ofportUser(n, "") == "" {
			return n
		}
	}
}

// bridgeOfPort names the bridge that holds a port, or "". Callers hold f.mu.
func (f *OVSDB) bridgeOfPort(port string) string {
	for name, b := range f.bridges {
		if _, ok := b.ports[port]; ok {
			return name
		}
	}
	return ""
}

// fakeMAC is a locally administered MAC derived from an ofport.
func fakeMAC(ofport int) string {
	return fmt.Sprintf("02:00:00:00:%02x:%02x", (ofport>>8)&0xff, ofport&0xff)
}

// usable fails once the fake is closed or the context is done. Callers hold f.mu.
func (f *OVSDB) usable(ctx context.Context) error {
	if f.closed {
		return errors.New("ovsdb client closed")
	}
	return ctx.Err()
}

// mergeKeys returns have with the keys of set set, as a new map.
func mergeKeys(have, set map[string]string) map[string]string {
	out := maps.Clone(have)
	if out == nil {
		out = map[string]string{}
	}
	maps.Copy(out, set)
	return out
}

func cloneBridgeSpec(s ovs.BridgeSpec) ovs.BridgeSpec {
	s.Protocols = slices.Clone(s.Protocols)
	s.OtherConfig, s.ExternalIDs = maps.Clone(s.OtherConfig), maps.Clone(s.ExternalIDs)
	return s
}

func clonePortSpec(s ovs.PortSpec) ovs.PortSpec {
	s.Options, s.ExternalIDs = maps.Clone(s.Options), maps.Clone(s.ExternalIDs)
	return s
}
