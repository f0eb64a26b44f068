package ovs

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"

	"github.com/ovn-kubernetes/libovsdb/client"
	"github.com/ovn-kubernetes/libovsdb/model"
	"github.com/ovn-kubernetes/libovsdb/ovsdb"
)

// EnsurePort creates the port and its interface on bridge, or brings an
// existing one to the spec (see PortSpec), in one transaction; then it waits,
// bounded by ctx, until ovs-vswitchd has applied it and returns the OpenFlow
// port number it assigned. If ovs-vswitchd could not create the interface, the
// error carries the Interface error column. A port that is already as
// specified, with its ofport, costs no transaction.
func (c *OVSDB) EnsurePort(ctx context.Context, bridge string, spec PortSpec) (int, error) {
	if err := spec.Validate(); err != nil {
		return 0, fmt.Errorf("ensure port on bridge %s: %w", bridge, err)
	}
	what := fmt.Sprintf("ensure port %s on bridge %s", spec.Name, bridge)
	err := c.retryWrite(ctx, func() error {
		ops, err := c.ensurePortOps(ctx, bridge, spec)
		if err != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
		if len(ops) == 0 {
			return nil
		}
		c.log.WithField("bridge", bridge).WithField("port", spec.Name).Debug("writing port")
		return c.transactAndWaitVswitchd(ctx, what, ops)
	})
	if err != nil {
		return 0, err
	}
	ofport, err := c.waitOfport(ctx, spec)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", what, err)
	}
	return ofport, nil
}

// DeletePort removes the port from the bridge; the database garbage-collects
// the port and its interface. A missing bridge or port, or a port on another
// bridge, is success. It does not wait for ovs-vswitchd.
func (c *OVSDB) DeletePort(ctx context.Context, bridge, name string) error {
	what := fmt.Sprintf("delete port %s from bridge %s", name, bridge)
	if name == bridge {
		return fmt.Errorf("%s: it is the bridge's own port; delete the bridge instead", what)
	}
	return c.retryWrite(ctx, func() error { return c.deletePort(ctx, what, bridge, name) })
}

func (c *OVSDB) deletePort(ctx context.Context, what, bridge, name string) error {
	br, err := c.bridge(ctx, bridge)
	if errors.Is(err, ErrNotFound) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	port, err := c.port(ctx, name)
	if errors.Is(err, ErrNotFound) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	if !slices.Contains(br.Ports, port.UUID) {
		c.log.WithField("bridge", bridge).WithField("port", name).Debug("port to delete is not on the bridge")
		return nil
	}
	row := &bridgeRow{UUID: br.UUID}
	ops, err := c.client.Where(row).Mutate(row, model.Mutation{
		Field: &row.Ports, Mutator: ovsdb.MutateOperationDelete, Value: []string{port.UUID},
	})
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	_, err = c.transact(ctx, what, ops)
	return err
}

// ensurePortOps returns the operations that bring the port to the spec, or
// none if it already matches.
func (c *OVSDB) ensurePortOps(ctx context.Context, bridge string, spec PortSpec) ([]ovsdb.Operation, error) {
	br, err := c.bridge(ctx, bridge)
	if err != nil {
		return nil, err
	}
	port, err := c.port(ctx, spec.Name)
	if errors.Is(err, ErrNotFound) {
		return c.createPortOps(br, spec)
	}
	if err != nil {
		return nil, err
	}
	if !slices.Contains(br.Ports, port.UUID) {
		return nil, c.portElsewhere(ctx, bridge, spec.Name, port.UUID)
	}
	if len(port.Interfaces) != 1 {
		return nil, fmt.Errorf("port %s has %d interfaces, expected one (a bond?)", spec.Name, len(port.Interfaces))
	}
	iface, err := c.iface(ctx, port.Interfaces[0])
	if err != nil {
		return nil, err
	}
	return c.updatePortOps(port, iface, spec)
}

// portElsewhere explains a port that bridge, as read, did not hold: another bridge's; or
// the read of the bridge came before, and that of the port after, another client's
// transaction adding it, or caught that update half applied (retried: errCacheMidUpdate).
func (c *OVSDB) portElsewhere(ctx context.Context, bridge, name, uuid string) error {
	var bridges []bridgeRow
	if err := c.client.List(ctx, &bridges); err != nil {
		return fmt.Errorf("list bridges: %w", err)
	}
	for _, b := range bridges {
		if !slices.Contains(b.Ports, uuid) {
			continue
		}
		if b.Name == bridge {
			return fmt.Errorf("port %s appeared on bridge %s while it was read: %w", name, bridge, errCacheMidUpdate)
		}
		return fmt.Errorf("port %s exists on bridge %s", name, b.Name)
	}
	return fmt.Errorf("port %s is on no bridge yet: %w", name, errCacheMidUpdate)
}

// createPortOps inserts the interface and port and links the port from the bridge.
func (c *OVSDB) createPortOps(br bridgeRow, spec PortSpec) ([]ovsdb.Operation, error) {
	iface := &interfaceRow{UUID: namedInterface, Name: spec.Name}
	setInterfaceColumns(iface, spec)
	iface.ExternalIDs = maps.Clone(spec.ExternalIDs)
	port := &portRow{UUID: namedPort, Name: spec.Name, Interfaces: []string{namedInterface},
		ExternalIDs: maps.Clone(spec.ExternalIDs)}
	var ops []ovsdb.Operation
	for _, m := range []model.Model{iface, port} {
		op, err := c.client.Create(m)
		if err != nil {
			return nil, err
		}
		ops = append(ops, op...)
	}
	row := &bridgeRow{UUID: br.UUID}
	link, err := c.client.Where(row).Mutate(row, model.Mutation{
		Field: &row.Ports, Mutator: ovsdb.MutateOperationInsert, Value: []string{namedPort},
	})
	if err != nil {
		return nil, err
	}
	return append(ops, link...), nil
}

// updatePortOps brings an existing port and interface to the spec; it returns
// no operations if they already match.
func (c *OVSDB) updatePortOps(port portRow, current interfaceRow, spec PortSpec) ([]ovsdb.Operation, error) {
	var ops []ovsdb.Operation
	iface := &interfaceRow{UUID: current.UUID}
	setInterfaceColumns(iface, spec)
	if !interfaceColumnsMatch(current, *iface) {
		op, err := c.client.Where(iface).Update(iface, interfaceOwnedFields(iface)...)
		if err != nil {
			return nil, err
		}
		ops = append(ops, op...)
	}
	if !containsAll(current.ExternalIDs, spec.ExternalIDs) {
		op, err := c.client.Where(iface).Mutate(iface, setKeys(&iface.ExternalIDs, spec.ExternalIDs)...)
		if err != nil {
			return nil, err
		}
		ops = append(ops, op...)
	}
	if !containsAll(port.ExternalIDs, spec.ExternalIDs) {
		p := &portRow{UUID: port.UUID}
		op, err := c.client.Where(p).Mutate(p, setKeys(&p.ExternalIDs, spec.ExternalIDs)...)
		if err != nil {
			return nil, err
		}
		ops = append(ops, op...)
	}
	return ops, nil
}

// setInterfaceColumns copies the columns EnsurePort replaces into iface.
func setInterfaceColumns(iface *interfaceRow, spec PortSpec) {
	iface.Type = spec.Type
	iface.Options = maps.Clone(spec.Options)
	iface.OfportRequest = ptr(spec.OfportRequest)
	iface.MTURequest = ptr(spec.MTURequest)
	iface.MAC = ptr(spec.MAC)
}

// interfaceOwnedFields points at the columns EnsurePort replaces.
func interfaceOwnedFields(iface *interfaceRow) []any {
	return []any{&iface.Type, &iface.Options, &iface.OfportRequest, &iface.MTURequest, &iface.MAC}
}

// interfaceColumnsMatch compares the columns EnsurePort replaces.
func interfaceColumnsMatch(a, b interfaceRow) bool {
	return a.Type == b.Type &&
		maps.Equal(a.Options, b.Options) &&
		deref(a.OfportRequest) == deref(b.OfportRequest) &&
		deref(a.MTURequest) == deref(b.MTURequest) &&
		deref(a.MAC) == deref(b.MAC)
}

// waitOfport waits until the interface has an ofport (the requested one, if
// any) or ovs-vswitchd reports an error for it.
func (c *OVSDB) waitOfport(ctx context.Context, spec PortSpec) (int, error) {
	var ofport int
	err := c.waitFor(ctx, "an ofport for port "+spec.Name, func() (bool, error) {
		iface, err := c.ifaceByName(ctx, spec.Name)
		if err != nil {
			return false, err
		}
		if msg := deref(iface.Error); msg != "" {
			return false, fmt.Errorf("ovs-vswitchd could not set up interface %s: %s", spec.Name, msg)
		}
		ofport = deref(iface.Ofport)
		if ofport <= 0 {
			return false, nil
		}
		if spec.OfportRequest > 0 && ofport != spec.OfportRequest {
			return false, fmt.Errorf("ovs-vswitchd assigned ofport %d, not the requested %d (is it taken by another port?)",
				ofport, spec.OfportRequest)
		}
		return true, nil
	})
	return ofport, err
}

// port returns the cached port row named name, or an error matching ErrNotFound.
func (c *OVSDB) port(ctx context.Context, name string) (portRow, error) {
	p := portRow{Name: name}
	if err := c.client.Get(ctx, &p); err != nil {
		if errors.Is(err, client.ErrNotFound) {
			return portRow{}, fmt.Errorf("port %s: %w", name, ErrNotFound)
		}
		return portRow{}, fmt.Errorf("look up port %s: %w", name, err)
	}
	return p, nil
}

// iface returns the cached interface row with the given UUID.
func (c *OVSDB) iface(ctx context.Context, uuid string) (interfaceRow, error) {
	i := interfaceRow{UUID: uuid}
	if err := c.client.Get(ctx, &i); err != nil {
		return interfaceRow{}, fmt.Errorf("look up interface %s: %w", uuid, err)
	}
	return i, nil
}

// ifaceByName returns the cached interface row named name.
func (c *OVSDB) ifaceByName(ctx context.Context, name string) (interfaceRow, error) {
	i := interfaceRow{Name: name}
	if err := c.client.Get(ctx, &i); err != nil {
		return interfaceRow{}, fmt.Errorf("look up interface %s: %w", name, err)
	}
	return i, nil
}
