package ovs

import (
	"strings"
	"testing"
)

func TestBundleTextRendersEachMod(t *testing.T) {
	flow := "cookie=0x1000300000003, table=10, priority=200,ip,in_port=3 actions=goto_table:30"
	for _, tc := range []struct {
		mod  Mod
		want string
	}{
		{AddFlow(flow), "flow add " + flow},
		{ModifyFlowStrict(flow), "flow modify_strict " + flow},
		{FlowMod{Op: FlowModify, Flow: "table=10, ip actions=drop"}, "flow modify table=10, ip actions=drop"},
		// A delete drops the actions and matches the cookie exactly.
		{DeleteFlowStrict(flow), "flow delete_strict cookie=0x1000300000003/-1,table=10,priority=200,ip,in_port=3"},
		{FlowMod{Op: FlowDelete, Flow: "cookie=0x1/0xff, table=3"}, "flow delete cookie=0x1/0xff,table=3"},
		{FlowMod{Op: FlowDelete}, "flow delete"},
		// A strict delete without a table means table 0, as the add did.
		{DeleteFlowStrict("priority=5,ip actions=drop"), "flow delete_strict table=0,priority=5,ip"},
		{DeleteFlowsByCookie(0x20000, 0xffff0000), "flow delete cookie=0x20000/0xffff0000"},
		{GroupMod{Op: GroupAddOrModify, Group: "group_id=1,type=all,bucket=actions=output:1"},
			"group add_or_mod group_id=1,type=all,bucket=actions=output:1"},
		{GroupMod{Op: GroupDelete, Group: "group_id=1"}, "group delete group_id=1"},
	} {
		got, err := BundleText([]Mod{tc.mod})
		if err != nil || strings.TrimSuffix(got, "\n") != tc.want {
			t.Errorf("BundleText(%+v) = %q, %v; want %q", tc.mod, got, err, tc.want)
		}
	}
}

func TestBundleTextRefusesBadMods(t *testing.T) {
	for _, m := range []Mod{
		AddFlow(""), FlowMod{Op: "insert", Flow: "actions=drop"}, AddFlow("a\nb"),
		GroupMod{Op: GroupAdd}, GroupMod{Op: "replace", Group: "group_id=1"}, nil,
	} {
		if _, err := BundleText([]Mod{m}); err == nil {
			t.Errorf("BundleText(%+v) succeeded", m)
		}
	}
}
