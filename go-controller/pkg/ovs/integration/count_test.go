package integration

import (
	"testing"

	"github.com/kovs-net/kovs/go-controller/pkg/ovs"
)

// TestCountFlowsCountsByCookieMask: dump-aggregate counts what a dump with the same cookie
// filter lists, and a deleted flow lowers the count (what the agent's resync checks).
func TestCountFlowsCountsByCookieMask(t *testing.T) {
	_, of, ctx := bridgeWithFlows(t)
	if err := of.Bundle(ctx, append(roundFlows(1, 300), roundFlows(2, 500)[300:]...)); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		round uint16
		want  int
	}{{1, 300}, {2, 200}, {3, 0}} {
		n, err := of.CountFlows(ctx, cookie(c.round, 0), roundMask)
		if err != nil {
			t.Fatal(err)
		}
		flows, err := of.DumpFlows(ctx, cookie(c.round, 0), roundMask)
		if err != nil {
			t.Fatal(err)
		}
		if n != c.want || len(flows) != c.want {
			t.Errorf("round %d: counted %d flows, dumped %d; want %d", c.round, n, len(flows), c.want)
		}
	}
	if n, err := of.CountFlows(ctx, 0, 0); err != nil || n != 500 {
		t.Errorf("CountFlows of every flow = %d, %v; want 500", n, err)
	}
	if err := of.Bundle(ctx, []ovs.Mod{ovs.DeleteFlowStrict("table=20, priority=200,ip,nw_dst=10.244.0.2")}); err != nil {
		t.Fatal(err)
	}
	if n, err := of.CountFlows(ctx, cookie(1, 0), roundMask); err != nil || n != 299 {
		t.Errorf("after deleting one flow of round 1: counted %d, %v; want 299", n, err)
	}
}
