package integration

import (
	"context"
	"testing"

	"github.com/kovs-net/kovs/go-controller/pkg/ovs"
	"github.com/kovs-net/kovs/go-controller/pkg/ovs/ovsfake"
)

// TestFakeOpenFlowMatchesOVS runs the same bundles through ovs-vswitchd and
// through ovsfake.OpenFlow and compares the results, so that unit tests built
// on the fake hold against OVS. The flows use OVS's canonical match syntax:
// the fake compares matches as text.
func TestFakeOpenFlowMatchesOVS(t *testing.T) {
	_, real, ctx := bridgeWithFlows(t)
	fake := ovsfake.NewOpenFlow()
	steps := []struct {
		name    string
		mods    []ovs.Mod
		wantErr bool
	}{
		{"install", []ovs.Mod{
			ovs.GroupMod{Op: ovs.GroupAdd, Group: "group_id=1,type=select,bucket=bucket_id:0,actions=output:3"},
			ovs.AddFlow("cookie=0x1000100000001, table=10, priority=200,ip,in_port=3 actions=goto_table:30"),
			ovs.AddFlow("cookie=0x1000100000002, table=10, priority=100,ip actions=group:1"),
			ovs.AddFlow("cookie=0x1000200000001, table=30, priority=0 actions=drop"),
		}, false},
		{"new round replaces and modify keeps the cookie", []ovs.Mod{
			ovs.AddFlow("cookie=0x2000100000001, table=10, priority=200,ip,in_port=3 actions=goto_table:31"),
			ovs.ModifyFlowStrict("cookie=0x2000200000001, table=30, priority=0 actions=output:2"),
		}, false},
		{"rejected bundle changes nothing", []ovs.Mod{
			ovs.DeleteFlowStrict("cookie=0x2000100000001, table=10, priority=200,ip,in_port=3 actions=goto_table:31"),
			ovs.AddFlow("table=10, priority=50,ip actions=group:9"),
		}, true},
		{"strict delete with the whole flow", []ovs.Mod{
			ovs.DeleteFlowStrict("cookie=0x2000100000001, table=10, priority=200,ip,in_port=3 actions=goto_table:31"),
		}, false},
		{"strict delete without a table means table 0", []ovs.Mod{
			ovs.AddFlow("cookie=0x5, priority=200,ip,in_port=4 actions=drop"),
			ovs.AddFlow("cookie=0x5, table=20, priority=200,ip,in_port=4 actions=drop"),
			ovs.DeleteFlowStrict("cookie=0x5, priority=200,ip,in_port=4 actions=drop"),
		}, false},
		{"delete the group and its flows", []ovs.Mod{
			ovs.GroupMod{Op: ovs.GroupDelete, Group: "group_id=1"},
		}, false},
	}
	for _, s := range steps {
		errReal, errFake := real.Bundle(ctx, s.mods), fake.Bundle(ctx, s.mods)
		if (errReal != nil) != s.wantErr || (errFake != nil) != s.wantErr {
			t.Fatalf("%s: OVS error %v, fake error %v; want error: %v", s.name, errReal, errFake, s.wantErr)
		}
		compareFlows(t, ctx, s.name, real, fake)
	}
	if err := real.DeleteFlows(ctx, 0x1000000000000, 0xffff000000000000); err != nil {
		t.Fatal(err)
	}
	if err := fake.DeleteFlows(ctx, 0x1000000000000, 0xffff000000000000); err != nil {
		t.Fatal(err)
	}
	compareFlows(t, ctx, "delete round 1", real, fake)
}

func compareFlows(t *testing.T, ctx context.Context, step string, real, fake ovs.FlowClient) {
	t.Helper()
	want, err := real.DumpFlows(ctx, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	got, err := fake.DumpFlows(ctx, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	index := map[string]bool{}
	for _, f := range want {
		index[f.String()] = true
	}
	if len(got) != len(want) {
		t.Fatalf("%s: fake has %d flows, OVS %d:\nOVS:  %v\nfake: %v", step, len(got), len(want), want, got)
	}
	for _, f := range got {
		if !index[f.String()] {
			t.Errorf("%s: fake flow %q is not in OVS: %v", step, f, want)
		}
	}
}
