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

// flowTableOwner marks the Flow_Table rows kovs writes.
const flowTableOwner = "kovs.io/owner"

// LimitFlowTables implements BridgeStore: each table of limits gets a Flow_Table row with
// its flow_limit, overflow_policy (evict or refuse) and eviction groups, mapped from the
// bridge's flow_tables; a row the bridge already maps the table to is updated in place.
// Nothing is written when every row already matches.
func (c *OVSDB) LimitFlowTables(ctx context.Context, bridge string, limits map[int]FlowTableLimit) error {
	what := "limit flow tables of bridge " + bridge
	for table, l := range limits {
		if table < 0 || table > 254 {
			return fmt.Errorf("%s: table %d: OpenFlow tables are 0-254", what, table)
		}
		if err := l.Validate(); err != nil {
			return fmt.Errorf("%s: table %d: %w", what, table, err)
		}
	}
	return c.retryWrite(ctx, func() error {
		ops, err := c.limitFlowTablesOps(ctx, bridge, limits)
		if err != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
		if len(ops) == 0 {
			return nil
		}
		return c.transactAndWaitVswitchd(ctx, what, ops)
	})
}

func (c *OVSDB) limitFlowTablesOps(ctx context.Context, bridge string, limits map[int]FlowTableLimit) ([]ovsdb.Operation, error) {
	br, err := c.bridge(ctx, bridge)
	if err != nil {
		return nil, err
	}
	var ops []ovsdb.Operation
	added := map[int]string{}
	for _, table := range slices.Sorted(maps.Keys(limits)) {
		want := flowTableRowOf(limits[table])
		if uuid, ok := br.FlowTables[table]; ok {
			have := &flowTableRow{UUID: uuid}
			err := c.client.Get(ctx, have)
			if err == nil && flowTableRowsMatch(*have, want) {
				continue
			}
			if err == nil {
				want.UUID = uuid
				op, err := c.client.Where(&want).Update(&want, &want.FlowLimit, &want.OverflowPolicy, &want.Groups, &want.ExternalIDs)
				if err != nil {
					return nil, err
				}
				ops = append(ops, op...)
				continue
			}
			if !errors.Is(err, client.ErrNotFound) {
				return nil, fmt.Errorf("flow table %d: %w", table, err)
			}
		}
		want.UUID = fmt.Sprintf("kovs_flow_table_%d", table)
		op, err := c.client.Create(&want)
		if err != nil {
			return nil, err
		}
		ops = append(ops, op...)
		added[table] = want.UUID
	}
	if len(added) > 0 {
		row := &bridgeRow{UUID: br.UUID}
		op, err := c.client.Where(row).Mutate(row, model.Mutation{Field: &row.FlowTables, Mutator: ovsdb.MutateOperationInsert, Value: added})
		if err != nil {
			return nil, err
		}
		ops = append(ops, op...)
	}
	return ops, nil
}

func flowTableRowOf(l FlowTableLimit) flowTableRow {
	policy := "refuse"
	if l.Evict {
		policy = "evict"
	}
	return flowTableRow{FlowLimit: ptr(l.FlowLimit), OverflowPolicy: &policy, Groups: slices.Clone(l.Groups),
		ExternalIDs: map[string]string{flowTableOwner: "kovs-agent"}}
}

func flowTableRowsMatch(have, want flowTableRow) bool {
	return deref(have.FlowLimit) == deref(want.FlowLimit) && deref(have.OverflowPolicy) == deref(want.OverflowPolicy) &&
		sameSet(have.Groups, want.Groups) && maps.Equal(have.ExternalIDs, want.ExternalIDs)
}
