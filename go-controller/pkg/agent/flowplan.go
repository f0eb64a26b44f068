package agent

import (
	"context"
	"maps"
	"slices"

	"github.com/kovs-net/kovs/go-controller/pkg/ovs"
	"github.com/kovs-net/kovs/go-controller/pkg/pipeline"
)

// plan returns the bundle that turns the installed flows and groups into the wanted ones:
// against what this syncer installed (incremental) or against the switch's dumps (full).
func (s *FlowSyncer) plan(ctx context.Context, want pipeline.Desired, full bool) (SwitchPlan, error) {
	haveFlows, haveGroups, err := s.have(ctx, full)
	if err != nil {
		return SwitchPlan{}, err
	}
	var p SwitchPlan
	for key, f := range want.Flows {
		if haveFlows[key] != f {
			p.AddFlows = append(p.AddFlows, f) // an add with the same key replaces the flow
		}
	}
	for key := range haveFlows {
		if _, ok := want.Flows[key]; !ok {
			p.DeleteFlows = append(p.DeleteFlows, key)
		}
	}
	for _, id := range slices.Sorted(maps.Keys(want.Groups)) {
		old, ok := haveGroups[id]
		switch {
		case !ok:
			p.AddGroups = append(p.AddGroups, want.Groups[id])
		case !old.Equal(want.Groups[id]):
			p.ModifyGroups = append(p.ModifyGroups, want.Groups[id])
		}
	}
	for _, id := range slices.Sorted(maps.Keys(haveGroups)) {
		if _, ok := want.Groups[id]; !ok {
			p.DeleteGroups = append(p.DeleteGroups, id)
		}
	}
	return p, nil
}

// have is what is installed: as this syncer recorded it, or (full) as the switch dumps
// it, kovs's flows and groups only. Learned flows are the switch's own (SCTP replies and
// translations): kovs never installs them, so they are no part of it.
func (s *FlowSyncer) have(ctx context.Context, full bool) (map[ovs.FlowKey]ovs.Flow, map[uint32]ovs.Group, error) {
	if !full {
		// record replaces the maps, never changes them: reading them needs no copy.
		s.mu.Lock()
		defer s.mu.Unlock()
		return s.installed, s.installedGroups, nil
	}
	dump, err := s.sw.Flows(ctx)
	if err != nil {
		return nil, nil, err
	}
	flows := make(map[ovs.FlowKey]ovs.Flow, len(dump))
	for _, f := range dump {
		if c := pipeline.Cookie(f.Cookie); c.Owned() && !c.Learned() {
			flows[f.FlowKey] = f
		}
	}
	dumpedGroups, err := s.sw.Groups(ctx)
	if err != nil {
		return nil, nil, err
	}
	groups := map[uint32]ovs.Group{}
	for _, g := range dumpedGroups {
		if s.ownsGroup(g.ID) {
			groups[g.ID] = g
		}
	}
	return flows, groups, nil
}
