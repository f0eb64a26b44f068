package ovs

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"

	"github.com/ovn-kubernetes/libovsdb/model"
	"github.com/ovn-kubernetes/libovsdb/ovsdb"
)

// Init creates the Open_vSwitch row if the database has none, as
// `ovs-vsctl --no-wait init` does. ovs-vswitchd waits for that row.
func (c *OVSDB) Init(ctx context.Context) error {
	// A conflict means another client initialized it first (the table allows
	// one row): the next attempt finds that row.
	err := c.retryWrite(ctx, func() error {
		var rows []openvSwitchRow
		if err := c.client.List(ctx, &rows); err != nil {
			return fmt.Errorf("init database: list Open_vSwitch: %w", err)
		}
		if len(rows) > 0 {
			return nil
		}
		// libovsdb leaves out the row of a model with only zero values, and
		// ovsdb-server refuses an insert without one: spell out a column.
		insert := ovsdb.Operation{Op: ovsdb.OperationInsert, Table: tableOVS, Row: ovsdb.Row{"next_cfg": 0}}
		_, err := c.transact(ctx, "init database", []ovsdb.Operation{insert})
		return err
	})
	if err != nil && !isConflict(err) {
		return err
	}
	return c.waitFor(ctx, "the Open_vSwitch row", func() (bool, error) {
		_, err := c.root(ctx)
		return err == nil, nil
	})
}

// root returns the cached Open_vSwitch row.
func (c *OVSDB) root(ctx context.Context) (openvSwitchRow, error) {
	var rows []openvSwitchRow
	if err := c.client.List(ctx, &rows); err != nil {
		return openvSwitchRow{}, fmt.Errorf("list Open_vSwitch: %w", err)
	}
	switch len(rows) {
	case 1:
		return rows[0], nil
	case 0:
		return openvSwitchRow{}, errors.New("the Open_vSwitch table has no row: the database is not initialized (ovs-vsctl --no-wait init)")
	default:
		return openvSwitchRow{}, fmt.Errorf("the Open_vSwitch table has %d rows, expected one", len(rows))
	}
}

// SetOtherConfig sets keys of Open_vSwitch other_config, leaving other keys alone.
func (c *OVSDB) SetOtherConfig(ctx context.Context, config map[string]string) error {
	return c.mutateRoot(ctx, "set Open_vSwitch other_config", func(r *openvSwitchRow) []model.Mutation {
		return setKeys(&r.OtherConfig, config)
	})
}

// RemoveOtherConfig removes keys of Open_vSwitch other_config; missing keys are fine.
func (c *OVSDB) RemoveOtherConfig(ctx context.Context, keys ...string) error {
	return c.mutateRoot(ctx, "remove Open_vSwitch other_config", func(r *openvSwitchRow) []model.Mutation {
		return removeKeys(&r.OtherConfig, keys)
	})
}

// SetExternalIDs sets keys of Open_vSwitch external_ids, leaving other keys alone.
func (c *OVSDB) SetExternalIDs(ctx context.Context, ids map[string]string) error {
	return c.mutateRoot(ctx, "set Open_vSwitch external_ids", func(r *openvSwitchRow) []model.Mutation {
		return setKeys(&r.ExternalIDs, ids)
	})
}

// OtherConfig returns a copy of Open_vSwitch other_config.
func (c *OVSDB) OtherConfig(ctx context.Context) (map[string]string, error) {
	r, err := c.root(ctx)
	if err != nil {
		return nil, err
	}
	return maps.Clone(r.OtherConfig), nil
}

// DatapathTypes lists the datapath types ovs-vswitchd reports. OVS 3.1 lists
// "system" even when the openvswitch kernel module is absent: this says what the
// binary supports, not what the kernel offers.
func (c *OVSDB) DatapathTypes(ctx context.Context) ([]string, error) {
	r, err := c.root(ctx)
	if err != nil {
		return nil, err
	}
	return slices.Clone(r.DatapathTypes), nil
}

// mutateRoot applies the mutations built by mutations to the Open_vSwitch row.
func (c *OVSDB) mutateRoot(ctx context.Context, what string, mutations func(*openvSwitchRow) []model.Mutation) error {
	return c.retryWrite(ctx, func() error { return c.mutateRootOnce(ctx, what, mutations) })
}

func (c *OVSDB) mutateRootOnce(ctx context.Context, what string, mutations func(*openvSwitchRow) []model.Mutation) error {
	r, err := c.root(ctx)
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	row := &openvSwitchRow{UUID: r.UUID}
	muts := mutations(row)
	if len(muts) == 0 {
		return nil
	}
	ops, err := c.client.Where(row).Mutate(row, muts...)
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	_, err = c.transact(ctx, what, ops)
	return err
}

// bumpConfigOps increments Open_vSwitch next_cfg and reads it back, as
// ovs-vsctl does, so that the caller can wait for ovs-vswitchd to apply the
// transaction (cur_cfg reaching that value). They go last in a transaction;
// appliedConfig reads their result.
func (c *OVSDB) bumpConfigOps(ctx context.Context) ([]ovsdb.Operation, error) {
	r, err := c.root(ctx)
	if err != nil {
		return nil, err
	}
	row := &openvSwitchRow{UUID: r.UUID}
	ops, err := c.client.Where(row).Mutate(row, model.Mutation{
		Field: &row.NextCfg, Mutator: ovsdb.MutateOperationAdd, Value: 1,
	})
	if err != nil {
		return nil, fmt.Errorf("bump next_cfg: %w", err)
	}
	sel, err := c.client.Where(row).Select(row, &row.NextCfg)
	if err != nil {
		return nil, fmt.Errorf("select next_cfg: %w", err)
	}
	return append(ops, sel...), nil
}

// appliedConfig returns the next_cfg value that bumpConfigOps selected.
func (c *OVSDB) appliedConfig(ops []ovsdb.Operation, results []ovsdb.OperationResult) (int, error) {
	var rows []*openvSwitchRow
	if err := c.client.GetSelectResults(ops, results[:len(ops)], &rows); err != nil {
		return 0, fmt.Errorf("read next_cfg: %w", err)
	}
	if len(rows) != 1 {
		return 0, fmt.Errorf("read next_cfg: %d rows selected", len(rows))
	}
	return rows[0].NextCfg, nil
}

// waitVswitchd waits until ovs-vswitchd has applied configuration cfg.
func (c *OVSDB) waitVswitchd(ctx context.Context, cfg int) error {
	err := c.waitFor(ctx, "ovs-vswitchd to apply the change (is it running?)", func() (bool, error) {
		r, err := c.root(ctx)
		if err != nil {
			return false, err
		}
		return r.CurCfg >= cfg, nil
	})
	return err
}

// setKeys sets the keys of set in the map column *field, leaving other keys
// alone: delete them, then insert them.
func setKeys(field *map[string]string, set map[string]string) []model.Mutation {
	if len(set) == 0 {
		return nil
	}
	return []model.Mutation{
		{Field: field, Mutator: ovsdb.MutateOperationDelete, Value: slices.Sorted(maps.Keys(set))},
		{Field: field, Mutator: ovsdb.MutateOperationInsert, Value: maps.Clone(set)},
	}
}

// removeKeys deletes keys from the map column *field.
func removeKeys(field *map[string]string, keys []string) []model.Mutation {
	if len(keys) == 0 {
		return nil
	}
	return []model.Mutation{{Field: field, Mutator: ovsdb.MutateOperationDelete, Value: slices.Clone(keys)}}
}

// containsAll reports whether have maps every key of want to the same value.
func containsAll(have, want map[string]string) bool {
	for k, v := range want {
		if hv, ok := have[k]; !ok || hv != v {
			return false
		}
	}
	return true
}
