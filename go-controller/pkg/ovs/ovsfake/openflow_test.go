package ovsfake

import (
	"context"
	"errors"
	"testing"

	"github.com/kovs-net/kovs/go-controller/pkg/ovs"
)

func TestFakeOpenFlowAddReplacesAndModifyKeepsCookie(t *testing.T) {
	f := NewOpenFlow()
	ctx := context.Background()
	mods := []ovs.Mod{
		ovs.AddFlow("cookie=0x1, table=10, priority=200,ip,in_port=3 actions=drop"),
		ovs.AddFlow("cookie=0x2, table=10, priority=200,in_port=3,ip actions=goto_table:30"), // same match, other order
		ovs.ModifyFlowStrict("cookie=0x3, table=10, priority=200,ip,in_port=3 actions=output:4"),
	}
	if err := f.Bundle(ctx, mods); err != nil {
		t.Fatal(err)
	}
	flows := f.Flows()
	if len(flows) != 1 || flows[0].Cookie != 2 || flows[0].Actions != "output:4" {
		t.Errorf("flows = %+v, want one flow with cookie 0x2 and the modified actions", flows)
	}
}

func TestFakeOpenFlowBundleIsAtomic(t *testing.T) {
	f := NewOpenFlow()
	ctx := context.Background()
	err := f.Bundle(ctx, []ovs.Mod{
		ovs.AddFlow("table=1, priority=1 actions=drop"),
		ovs.AddFlow("table=1, priority=2 actions=group:9"), // no such group
	})
	var be *ovs.BundleError
	if !errors.As(err, &be) || be.Line != 2 {
		t.Fatalf("Bundle = %v, want a BundleError on line 2", err)
	}
	if len(f.Flows()) != 0 || f.Bundles() != 0 {
		t.Errorf("a failed bundle left %d flows", len(f.Flows()))
	}
	f.FailNextBundle(errors.New("injected"))
	if err := f.Bundle(ctx, []ovs.Mod{ovs.AddFlow("priority=1 actions=drop")}); err == nil || len(f.Flows()) != 0 {
		t.Errorf("FailNextBundle: %v, %d flows", err, len(f.Flows()))
	}
}

func TestFakeOpenFlowDeletes(t *testing.T) {
	f := NewOpenFlow()
	ctx := context.Background()
	mods := []ovs.Mod{
		ovs.AddFlow("cookie=0x10001, table=1, priority=10,ip,nw_dst=10.0.0.1 actions=drop"),
		ovs.AddFlow("cookie=0x10002, table=1, priority=10,ip,nw_dst=10.0.0.2 actions=drop"),
		ovs.AddFlow("cookie=0x20001, table=2, priority=10,ip,nw_dst=10.0.0.1 actions=drop"),
		ovs.AddFlow("cookie=0x20002, table=2, priority=5,ip actions=drop"),
	}
	if err := f.Bundle(ctx, mods); err != nil {
		t.Fatal(err)
	}
	if err := f.DeleteFlows(ctx, 0x10000, 0xffff0000); err != nil {
		t.Fatal(err)
	}
	if err := f.Bundle(ctx, []ovs.Mod{ovs.DeleteFlowStrict("cookie=0x20002, table=2, priority=5,ip actions=drop")}); err != nil {
		t.Fatal(err)
	}
	flows, _ := f.DumpFlows(ctx, 0, 0)
	if len(flows) != 1 || flows[0].Cookie != 0x20001 {
		t.Fatalf("flows = %+v, want only cookie 0x20001", flows)
	}
	// A loose delete selects by included match fields.
	if err := f.Bundle(ctx, []ovs.Mod{ovs.FlowMod{Op: ovs.FlowDelete, Flow: "nw_dst=10.0.0.1"}}); err != nil {
		t.Fatal(err)
	}
	if n := len(f.Flows()); n != 0 {
		t.Errorf("%d flows left", n)
	}
}

func TestFakeOpenFlowGroups(t *testing.T) {
	f := NewOpenFlow()
	ctx := context.Background()
	add := ovs.GroupMod{Op: ovs.GroupAdd, Group: "group_id=1,type=select,bucket=actions=output:3"}
	if err := f.Bundle(ctx, []ovs.Mod{add, ovs.AddFlow("priority=1,ip actions=group:1")}); err != nil {
		t.Fatal(err)
	}
	if err := f.Bundle(ctx, []ovs.Mod{add}); err == nil {
		t.Error("adding an existing group succeeded")
	}
	if err := f.Bundle(ctx, []ovs.Mod{ovs.GroupMod{Op: ovs.GroupModify, Group: "group_id=2,type=all,bucket=actions=drop"}}); err == nil {
		t.Error("modifying a missing group succeeded")
	}
	if err := f.Bundle(ctx, []ovs.Mod{ovs.GroupMod{Op: ovs.GroupDelete, Group: "group_id=1"}}); err != nil {
		t.Fatal(err)
	}
	groups, _ := f.DumpGroups(ctx)
	if len(groups) != 0 || len(f.Flows()) != 0 {
		t.Errorf("after deleting the group: %d groups, %d flows; want none (its flows go too)", len(groups), len(f.Flows()))
	}
}
