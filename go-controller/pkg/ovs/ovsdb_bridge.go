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

// Named UUIDs that link the rows one transaction creates.
const (
	namedBridge    = "kovs_bridge"
	namedPort      = "kovs_port"
	namedInterface = "kovs_interface"
)

// EnsureBridge creates the bridge, with its internal port and interface as
// ovs-vsctl add-br does, and adds it to Open_vSwitch.bridges; or, if it exists,
// updates the columns the spec owns (see BridgeSpec). It returns once
// ovs-vswitchd has applied the change, so the bridge's OpenFlow management
// socket exists, or with an error if ovs-vswitchd could not create it. A
// bridge that already matches the spec costs no transaction.
func (c *OVSDB) EnsureBridge(ctx context.Context, spec BridgeSpec) error {
	if err := spec.Validate(); err != nil {
		return fmt.Errorf("ensure bridge: %w", err)
	}
	what := "ensure bridge " + spec.Name
	err := c.retryWrite(ctx, func() error { return c.writeBridge(ctx, what, spec) })
	if err != nil {
		return err
	}
	return c.checkBridgeCreated(ctx, spec.Name)
}

// writeBridge creates or updates the bridge, unless it already matches the
// spec and ovs-vswitchd created it, and waits for ovs-vswitchd.
func (c *OVSDB) writeBridge(ctx context.Context, what string, spec BridgeSpec) error {
	root, err := c.root(ctx)
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	current, err := c.bridge(ctx, spec.Name)
	var ops []ovsdb.Operation
	switch {
	case errors.Is(err, ErrNotFound):
		ops, err = c.createBridgeOps(root, spec)
	case err != nil:
		return fmt.Errorf("%s: %w", what, err)
	default:
		ops, err = c.updateBridgeOps(root, current, spec)
	}
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	if len(ops) == 0 && deref(current.DatapathID) != "" {
		return nil
	}
	c.log.WithField("bridge", spec.Name).Debug("writing bridge")
	return c.transactAndWaitVswitchd(ctx, what, ops)
}

// checkBridgeCreated reports an error if ovs-vswitchd, having applied the
// configuration, did not create the bridge (it then sets no datapath_id), for
// example a system datapath without the openvswitch kernel module.
func (c *OVSDB) checkBridgeCreated(ctx context.Context, name string) error {
	br, err := c.bridge(ctx, name)
	if err != nil {
		return fmt.Errorf("ensure bridge %s: %w", name, err)
	}
	if deref(br.DatapathID) == "" {
		return fmt.Errorf("ensure bridge %s: ovs-vswitchd did not create it (no datapath_id; datapath type %q; its log says why)",
			name, br.DatapathType)
	}
	return nil
}

// DeleteBridge removes the bridge from Open_vSwitch.bridges; the database
// garbage-collects it with its ports and interfaces. A missing bridge is
// success. It returns once ovs-vswitchd has applied the removal (the bridge's
// ports, on the userspace datapath their tap devices too, are gone), so a caller
// may then stop ovs-vswitchd without leaving them behind.
func (c *OVSDB) DeleteBridge(ctx context.Context, name string) error {
	what := "delete bridge " + name
	return c.retryWrite(ctx, func() error { return c.deleteBridge(ctx, what, name) })
}

func (c *OVSDB) deleteBridge(ctx context.Context, what, name string) error {
	current, err := c.bridge(ctx, name)
	if errors.Is(err, ErrNotFound) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	root, err := c.root(ctx)
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	row := &openvSwitchRow{UUID: root.UUID}
	ops, err := c.client.Where(row).Mutate(row, model.Mutation{
		Field: &row.Bridges, Mutator: ovsdb.MutateOperationDelete, Value: []string{current.UUID},
	})
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	return c.transactAndWaitVswitchd(ctx, what, ops)
}

// bridge returns the cached bridge row named name, or an error matching ErrNotFound.
func (c *OVSDB) bridge(ctx context.Context, name string) (bridgeRow, error) {
	b := bridgeRow{Name: name}
	if err := c.client.Get(ctx, &b); err != nil {
		if errors.Is(err, client.ErrNotFound) {
			return bridgeRow{}, fmt.Errorf("bridge %s: %w", name, ErrNotFound)
		}
		return bridgeRow{}, fmt.Errorf("look up bridge %s: %w", name, err)
	}
	return b, nil
}

// createBridgeOps inserts the bridge, its internal port and interface, and
// links the bridge from the Open_vSwitch row.
func (c *OVSDB) createBridgeOps(root openvSwitchRow, spec BridgeSpec) ([]ovsdb.Operation, error) {
	iface := &interfaceRow{UUID: namedInterface, Name: spec.Name, Type: PortTypeInternal}
	port := &portRow{UUID: namedPort, Name: spec.Name, Interfaces: []string{namedInterface}}
	br := &bridgeRow{
		UUID:         namedBridge,
		Name:         spec.Name,
		Ports:        []string{namedPort},
		DatapathType: spec.DatapathType,
		FailMode:     ptr(spec.FailMode),
		Protocols:    slices.Clone(spec.Protocols),
		OtherConfig:  maps.Clone(spec.OtherConfig),
		ExternalIDs:  maps.Clone(spec.ExternalIDs),
	}
	var ops []ovsdb.Operation
	for _, m := range []model.Model{iface, port, br} {
		op, err := c.client.Create(m)
		if err != nil {
			return nil, err
		}
		ops = append(ops, op...)
	}
	link, err := c.linkBridgeOps(root, namedBridge)
	if err != nil {
		return nil, err
	}
	return append(ops, link...), nil
}

// updateBridgeOps brings an existing bridge's owned columns to the spec; it
// returns no operations if they already match.
func (c *OVSDB) updateBridgeOps(root openvSwitchRow, current bridgeRow, spec BridgeSpec) ([]ovsdb.Operation, error) {
	var ops []ovsdb.Operation
	row := &bridgeRow{UUID: current.UUID}
	if !bridgeColumnsMatch(current, spec) {
		row.DatapathType = spec.DatapathType
		row.FailMode = ptr(spec.FailMode)
		row.Protocols = slices.Clone(spec.Protocols)
		op, err := c.client.Where(row).Update(row, &row.DatapathType, &row.FailMode, &row.Protocols)
		if err != nil {
			return nil, err
		}
		ops = append(ops, op...)
	}
	var muts []model.Mutation
	if !containsAll(current.OtherConfig, spec.OtherConfig) {
		muts = append(muts, setKeys(&row.OtherConfig, spec.OtherConfig)...)
	}
	if !containsAll(current.ExternalIDs, spec.ExternalIDs) {
		muts = append(muts, setKeys(&row.ExternalIDs, spec.ExternalIDs)...)
	}
	if len(muts) > 0 {
		op, err := c.client.Where(row).Mutate(row, muts...)
		if err != nil {
			return nil, err
		}
		ops = append(ops, op...)
	}
	if !slices.Contains(root.Bridges, current.UUID) {
		link, err := c.linkBridgeOps(root, current.UUID)
		if err != nil {
			return nil, err
		}
		ops = append(ops, link...)
	}
	return ops, nil
}

// linkBridgeOps adds bridge (a UUID or named UUID) to Open_vSwitch.bridges.
func (c *OVSDB) linkBridgeOps(root openvSwitchRow, bridge string) ([]ovsdb.Operation, error) {
	row := &openvSwitchRow{UUID: root.UUID}
	return c.client.Where(row).Mutate(row, model.Mutation{
		Field: &row.Bridges, Mutator: ovsdb.MutateOperationInsert, Value: []string{bridge},
	})
}

// bridgeColumnsMatch reports whether the columns EnsureBridge replaces match.
func bridgeColumnsMatch(current bridgeRow, spec BridgeSpec) bool {
	return current.DatapathType == spec.DatapathType &&
		deref(current.FailMode) == spec.FailMode &&
		sameSet(current.Protocols, spec.Protocols)
}

// sameSet reports whether a and b hold the same strings, in any order.
func sameSet(a, b []string) bool {
	return slices.Equal(slices.Sorted(slices.Values(a)), slices.Sorted(slices.Values(b)))
}

// transactAndWaitVswitchd runs ops, plus a next_cfg bump, as one transaction
// and waits until ovs-vswitchd has applied it.
func (c *OVSDB) transactAndWaitVswitchd(ctx context.Context, what string, ops []ovsdb.Operation) error {
	bump, err := c.bumpConfigOps(ctx)
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	ops = append(ops, bump...)
	results, err := c.transact(ctx, what, ops)
	if err != nil {
		return err
	}
	cfg, err := c.appliedConfig(ops, results)
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	if err := c.waitVswitchd(ctx, cfg); err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	return nil
}

// SetBridgeExternalIDs sets keys of the bridge's external_ids, leaving other keys alone.
// It returns once ovsdb-server committed the change (it does not wait for
// ovs-vswitchd, which does not read these keys).
func (c *OVSDB) SetBridgeExternalIDs(ctx context.Context, bridge string, ids map[string]string) error {
	what := fmt.Sprintf("set external_ids of bridge %s", bridge)
	return c.retryWrite(ctx, func() error {
		current, err := c.bridge(ctx, bridge)
		if err != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
		if containsAll(current.ExternalIDs, ids) {
			return nil
		}
		row := &bridgeRow{UUID: current.UUID}
		ops, err := c.client.Where(row).Mutate(row, setKeys(&row.ExternalIDs, ids)...)
		if err != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
		_, err = c.transact(ctx, what, ops)
		return err
	})
}

// BridgeExternalIDs returns a copy of the bridge's external_ids.
func (c *OVSDB) BridgeExternalIDs(ctx context.Context, bridge string) (map[string]string, error) {
	current, err := c.bridge(ctx, bridge)
	if err != nil {
		return nil, err
	}
	return maps.Clone(current.ExternalIDs), nil
}
