package ovsfake

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"

	"github.com/kovs-net/kovs/go-controller/pkg/ovs"
)

// OpenFlow is an in-memory FlowClient for unit tests of the packages above
// pkg/ovs. It applies bundles atomically with OpenFlow's semantics (add
// replaces the flow with the same table, priority and match; modify keeps the
// cookie; deletes match on table, cookie/mask and match fields; a flow may
// only output to an existing group). Matches are compared as text, field by
// field in any order: it does not normalize them as OVS does ("ip" is not
// "dl_type=0x0800", a port name is not its number). It is safe for concurrent use.
type OpenFlow struct {
	mu       sync.Mutex
	flows    map[flowKey]ovs.FlowEntry
	groups   map[uint32]ovs.GroupEntry
	meters   map[uint32]ovs.Meter
	bundles  int
	failNext error
}

// flowKey identifies a flow as strict mods do: table, priority and match
// (fields sorted).
type flowKey struct {
	table    int
	priority int
	match    string
}

var _ ovs.FlowClient = (*OpenFlow)(nil)

// NewOpenFlow returns a bridge with no flows and no groups.
func NewOpenFlow() *OpenFlow {
	return &OpenFlow{flows: map[flowKey]ovs.FlowEntry{}, groups: map[uint32]ovs.GroupEntry{}}
}

// FailNextBundle makes the next Bundle fail with err and apply nothing.
func (f *OpenFlow) FailNextBundle(err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.failNext = err
}

// Bundles counts the bundles applied so far (failed ones excluded).
func (f *OpenFlow) Bundles() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.bundles
}

// Flows returns every flow, sorted by table, then priority (highest first),
// then match.
func (f *OpenFlow) Flows() []ovs.FlowEntry {
	f.mu.Lock()
	defer f.mu.Unlock()
	return sortedFlows(f.flows, func(ovs.FlowEntry) bool { return true })
}

// Bundle implements FlowClient: all mods apply, or none.
func (f *OpenFlow) Bundle(ctx context.Context, mods []ovs.Mod) error {
	if len(mods) == 0 {
		return nil
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("bundle on fake bridge: %w", err)
	}
	if err := f.failNext; err != nil {
		f.failNext = nil
		return err
	}
	next := &fakeTables{flows: maps.Clone(f.flows), groups: maps.Clone(f.groups)}
	for i, m := range mods {
		if err := next.apply(m); err != nil {
			line, _ := ovs.BundleText(mods[i : i+1])
			return &ovs.BundleError{Bridge: "fake", Line: i + 1, Mod: strings.TrimSpace(line), Reason: err.Error(), Err: err}
		}
	}
	f.flows, f.groups = next.flows, next.groups
	f.bundles++
	return nil
}

// DumpFlows implements FlowClient.
func (f *OpenFlow) DumpFlows(ctx context.Context, cookie, mask uint64) ([]ovs.FlowEntry, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("dump flows of fake bridge: %w", err)
	}
	return sortedFlows(f.flows, func(e ovs.FlowEntry) bool { return e.Cookie&mask == cookie&mask }), nil
}

// CountFlows implements FlowClient.
func (f *OpenFlow) CountFlows(ctx context.Context, cookie, mask uint64) (int, error) {
	flows, err := f.DumpFlows(ctx, cookie, mask)
	if err != nil {
		return 0, fmt.Errorf("count flows of fake bridge: %w", err)
	}
	return len(flows), nil
}

// DeleteFlows implements FlowClient.
func (f *OpenFlow) DeleteFlows(ctx context.Context, cookie, mask uint64) error {
	if mask == 0 {
		return fmt.Errorf("delete flows of fake bridge: refusing a zero cookie mask, which matches every flow")
	}
	return f.Bundle(ctx, []ovs.Mod{ovs.DeleteFlowsByCookie(cookie, mask)})
}

// DumpGroups implements FlowClient.
func (f *OpenFlow) DumpGroups(ctx context.Context) ([]ovs.GroupEntry, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("dump groups of fake bridge: %w", err)
	}
	groups := slices.Collect(maps.Values(f.groups))
	slices.SortFunc(groups, func(a, b ovs.GroupEntry) int { return cmp.Compare(a.ID, b.ID) })
	return groups, nil
}

// sortedFlows returns the flows keep selects, in dump order.
func sortedFlows(flows map[flowKey]ovs.FlowEntry, keep func(ovs.FlowEntry) bool) []ovs.FlowEntry {
	var out []ovs.FlowEntry
	for _, e := range flows {
		if keep(e) {
			out = append(out, e)
		}
	}
	slices.SortFunc(out, func(a, b ovs.FlowEntry) int {
		return cmp.Or(cmp.Compare(a.Table, b.Table), cmp.Compare(b.Priority, a.Priority), cmp.Compare(a.Match, b.Match))
	})
	return out
}
