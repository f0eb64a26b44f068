package agent

import (
	"context"
	"testing"

	"github.com/kovs-net/kovs/go-controller/pkg/ovs"
	"github.com/kovs-net/kovs/go-controller/pkg/ovs/ovsfake"
	"github.com/kovs-net/kovs/go-controller/pkg/pipeline"
)

// TestResyncReadsOnlyInstalledFlows (issue 14): the full resync's dump of br-int asks the
// switch for the flows without the learned category, so the learned SCTP replies and
// translations and Service affinities, which any pod can multiply, never reach the agent.
func TestResyncReadsOnlyInstalledFlows(t *testing.T) {
	of := ovsfake.NewOpenFlow()
	ctx := context.Background()
	installed := "cookie=0x1030000000003, table=10, priority=200,ip,in_port=3,dl_src=0a:58:0a:f4:01:0a,nw_src=10.244.1.10 actions=goto_table:30"
	learned := []string{
		"cookie=0x1800000000000, table=32, idle_timeout=120, priority=100,sctp,nw_src=10.244.3.10,nw_dst=10.244.1.10,tp_src=9999,tp_dst=40000 actions=set_field:0x200/0x300->reg0",
		"cookie=0x18001deadbeef, table=47, idle_timeout=120, priority=100,sctp,nw_src=10.244.1.10,nw_dst=10.96.0.10,tp_src=40000,tp_dst=80 actions=load:0xaf40310->NXM_OF_IP_DST[]",
		"cookie=0x800200000000, table=41, idle_timeout=10800, priority=200,tcp,nw_src=10.244.1.10,nw_dst=10.96.0.10,tp_dst=80 actions=load:0x1->NXM_NX_REG3[]",
	}
	var mods []ovs.Mod
	for _, line := range append([]string{installed}, learned...) {
		mods = append(mods, ovs.AddFlow(line))
	}
	if err := of.Bundle(ctx, mods); err != nil {
		t.Fatal(err)
	}
	flows, err := OpenFlowSwitch(of).Flows(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(flows) != 1 || pipeline.Cookie(flows[0].Cookie).Learned() {
		t.Errorf("the resync read %d flows: %v; want the installed one alone", len(flows), flows)
	}
}
