package agent

import (
	"context"
	"maps"
	"slices"
	"strconv"
	"sync"

	"github.com/kovs-net/kovs/go-controller/pkg/ovs"
	"github.com/kovs-net/kovs/go-controller/pkg/pipeline"
)

// groupPlanner is a FlowSwitch that also installs OpenFlow groups: before each Apply the
// flow syncer asks it to plan the group changes of the same desired state, and Apply puts
// them in the same atomic bundle as the flows.
type groupPlanner interface {
	planGroups(ctx context.Context, full bool) (changed bool, err error)
}

// groupSwitch is br-int's OpenFlow side with the Service groups: one bundle adds and
// modifies groups, deletes and adds flows, then deletes the groups no flow needs.
type groupSwitch struct {
	of      ovs.FlowClient
	desired func() []pipeline.Group

	mu        sync.Mutex
	installed map[uint32]string // group ID -> text, as last applied
	plan      groupPlan
}

// groupPlan is the group part of the next bundle.
type groupPlan struct {
	adds, mods []string
	deletes    []uint32
	want       map[uint32]string
}

var (
	_ FlowSwitch   = (*groupSwitch)(nil)
	_ groupPlanner = (*groupSwitch)(nil)
)

func newGroupSwitch(of ovs.FlowClient, desired func() []pipeline.Group) *groupSwitch {
	return &groupSwitch{of: of, desired: desired, installed: map[uint32]string{}}
}

// planGroups diffs the desired groups against what this switch installed (incremental) or
// against the bridge's dump of kovs's groups (full).
func (g *groupSwitch) planGroups(ctx context.Context, full bool) (bool, error) {
	want := map[uint32]string{}
	for _, grp := range g.desired() {
		want[grp.ID] = grp.String()
	}
	have := map[uint32]string{}
	if full {
		dump, err := g.of.DumpGroups(ctx)
		if err != nil {
			return false, err
		}
		for _, e := range dump {
			if pipeline.IsServiceGroup(e.ID) {
				have[e.ID] = e.Text
			}
		}
	} else {
		g.mu.Lock()
		have = maps.Clone(g.installed)
		g.mu.Unlock()
	}
	p := groupPlan{want: want}
	for _, id := range slices.Sorted(maps.Keys(want)) {
		old, ok := have[id]
		switch {
		case !ok:
			p.adds = append(p.adds, want[id])
		case old != want[id]:
			p.mods = append(p.mods, want[id])
		}
	}
	for _, id := range slices.Sorted(maps.Keys(have)) {
		if _, ok := want[id]; !ok {
			p.deletes = append(p.deletes, id)
		}
	}
	g.mu.Lock()
	g.plan = p
	g.mu.Unlock()
	return len(p.adds)+len(p.mods)+len(p.deletes) > 0, nil
}

// Apply implements FlowSwitch: the planned groups and the flows in one bundle.
func (g *groupSwitch) Apply(ctx context.Context, deletes, adds []string) error {
	g.mu.Lock()
	p := g.plan
	g.plan = groupPlan{}
	g.mu.Unlock()
	mods := make([]ovs.Mod, 0, len(p.adds)+len(p.mods)+len(deletes)+len(adds)+len(p.deletes))
	for _, text := range p.adds {
		mods = append(mods, ovs.GroupMod{Op: ovs.GroupAdd, Group: text})
	}
	for _, text := range p.mods {
		mods = append(mods, ovs.GroupMod{Op: ovs.GroupModify, Group: text})
	}
	for _, d := range deletes {
		mods = append(mods, ovs.DeleteFlowStrict(d))
	}
	for _, a := range adds {
		mods = append(mods, ovs.AddFlow(a))
	}
	for _, id := range p.deletes {
		mods = append(mods, ovs.GroupMod{Op: ovs.GroupDelete, Group: groupIDText(id)})
	}
	if err := g.of.Bundle(ctx, mods); err != nil {
		return err
	}
	if p.want != nil {
		g.mu.Lock()
		g.installed = p.want
		g.mu.Unlock()
	}
	return nil
}

// Flows implements FlowSwitch.
func (g *groupSwitch) Flows(ctx context.Context) ([]string, error) { return ofSwitch{g.of}.Flows(ctx) }

func groupIDText(id uint32) string { return "group_id=" + uintText(id) }

func uintText(v uint32) string { return strconv.FormatUint(uint64(v), 10) }
