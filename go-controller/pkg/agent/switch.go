package agent

import (
	"context"
	"fmt"

	"github.com/kovs-net/kovs/go-controller/pkg/ovs"
	"github.com/kovs-net/kovs/go-controller/pkg/pipeline"
)

// OpenFlowSwitch is br-int's OpenFlow side as the flow syncer sees it, on an OpenFlow
// client (the agent's ovs-ofctl client, or a fake in tests).
func OpenFlowSwitch(of ovs.FlowClient) FlowSwitch { return ofSwitch{of} }

type ofSwitch struct{ of ovs.FlowClient }

// Apply implements FlowSwitch: the plan as one bundle, in the order SwitchPlan gives.
func (s ofSwitch) Apply(ctx context.Context, p SwitchPlan) error {
	mods := make([]ovs.Mod, 0, len(p.AddGroups)+len(p.ModifyGroups)+len(p.DeleteFlows)+len(p.AddFlows)+len(p.DeleteGroups))
	for _, g := range p.AddGroups {
		mods = append(mods, g.Add())
	}
	for _, g := range p.ModifyGroups {
		mods = append(mods, g.Modify())
	}
	for _, k := range p.DeleteFlows {
		mods = append(mods, k.DeleteStrict())
	}
	for _, f := range p.AddFlows {
		mods = append(mods, f.Add())
	}
	for _, id := range p.DeleteGroups {
		mods = append(mods, ovs.DeleteGroup(id))
	}
	return s.of.Bundle(ctx, mods)
}

// Flows implements FlowSwitch: the flows without the learned category's bit, which the
// switch hands over alone (pipeline.InstalledFilter), so the learned tables, however
// full, cost the resync nothing.
func (s ofSwitch) Flows(ctx context.Context) ([]ovs.Flow, error) {
	installed := pipeline.InstalledFilter()
	entries, err := s.of.DumpFlows(ctx, uint64(installed.Value), uint64(installed.Mask))
	if err != nil {
		return nil, err
	}
	out := make([]ovs.Flow, len(entries))
	for i, e := range entries {
		if out[i], err = e.Flow(); err != nil {
			return nil, fmt.Errorf("dumped flows: %w", err)
		}
	}
	return out, nil
}

// CountFlows implements FlowSwitch: one dump-aggregate, which reads a number.
func (s ofSwitch) CountFlows(ctx context.Context, filter pipeline.CookieFilter) (int, error) {
	return s.of.CountFlows(ctx, uint64(filter.Value), uint64(filter.Mask))
}

// Groups implements FlowSwitch. A group whose dump does not parse is kept by ID and type
// only, so that it differs from any wanted group and is replaced.
func (s ofSwitch) Groups(ctx context.Context) ([]ovs.Group, error) {
	entries, err := s.of.DumpGroups(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]ovs.Group, len(entries))
	for i, e := range entries {
		g, err := e.Group()
		if err != nil {
			g = ovs.Group{ID: e.ID, Type: e.Type}
		}
		out[i] = g
	}
	return out, nil
}

// nextRound is the round for this agent incarnation: one past the newest round of the
// flows on the switch, so every flow this agent installs is told apart from its
// predecessor's, and the predecessor's flows stay until they are replaced.
func nextRound(ctx context.Context, of ovs.FlowClient) (pipeline.Round, error) {
	installed := pipeline.InstalledFilter()
	entries, err := of.DumpFlows(ctx, uint64(installed.Value), uint64(installed.Mask))
	if err != nil {
		return 0, err
	}
	newest := pipeline.Round(0)
	for _, e := range entries {
		c := pipeline.Cookie(e.Cookie)
		if c.Owned() && c.Round() > newest {
			newest = c.Round()
		}
	}
	next := newest + 1
	if next == 0 {
		next = 1
	}
	return next, nil
}
