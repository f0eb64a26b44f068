package integration

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/kovs-net/kovs/go-controller/pkg/ovs"
	"github.com/kovs-net/kovs/go-controller/pkg/ovs/ovstest"
)

// bridgeWithFlows starts a rig with br-int and returns an OpenFlow client for it.
func bridgeWithFlows(t *testing.T) (*ovstest.Rig, *ovs.OpenFlow, context.Context) {
	t.Helper()
	rig := ovstest.Start(t)
	ctx := testContext(t)
	db := connect(t, ctx, rig)
	if err := db.EnsureBridge(ctx, brIntSpec()); err != nil {
		t.Fatal(err)
	}
	of, err := ovs.NewOpenFlow(ovs.OpenFlowConfig{Bridge: "br-int", RunDir: rig.Dir, VswitchdCtl: rig.VswitchdCtl})
	if err != nil {
		t.Fatal(err)
	}
	return rig, of, ctx
}

const roundMask = 0xffff_0000_0000_0000

func cookie(round uint16, obj uint32) uint64 { return uint64(round)<<48 | 3<<40 | uint64(obj) }

// roundFlows renders n flows of round r, one per pod address.
func roundFlows(r uint16, n int) []ovs.Mod {
	mods := make([]ovs.Mod, 0, n)
	for i := range n {
		mods = append(mods, ovs.AddFlow(fmt.Sprintf(
			"cookie=%#x, table=20, priority=200,ip,nw_dst=10.244.%d.%d actions=ct(table=30,zone=1,nat)",
			cookie(r, uint32(i)), i/250, i%250+2)))
	}
	return mods
}

func TestBundleOfAThousandFlows(t *testing.T) {
	_, of, ctx := bridgeWithFlows(t)
	start := time.Now()
	if err := of.Bundle(ctx, roundFlows(1, 1000)); err != nil {
		t.Fatal(err)
	}
	t.Logf("1000-flow bundle applied in %v", time.Since(start))
	flows, err := of.DumpFlows(ctx, cookie(1, 0), roundMask)
	if err != nil {
		t.Fatal(err)
	}
	if len(flows) != 1000 {
		t.Fatalf("dumped %d flows of round 1, want 1000", len(flows))
	}
	seen := map[uint64]bool{}
	for _, f := range flows {
		seen[f.Cookie] = true
		if f.Table != 20 || f.Priority != 200 || f.Actions != "ct(table=30,zone=1,nat)" || !strings.HasPrefix(f.Match, "ip,nw_dst=10.244.") {
			t.Fatalf("unexpected flow %+v", f)
		}
	}
	if len(seen) != 1000 {
		t.Errorf("%d distinct cookies, want 1000", len(seen))
	}
}

func TestBundleIsAtomic(t *testing.T) {
	rig, of, ctx := bridgeWithFlows(t)
	mods := roundFlows(1, 10)
	mods[6] = ovs.AddFlow("table=20, priority=200,ip actions=output:9999999")
	err := of.Bundle(ctx, mods)
	var be *ovs.BundleError
	if !errors.As(err, &be) || be.Line != 7 || !strings.Contains(be.Mod, "9999999") {
		t.Fatalf("Bundle with a bad line = %v, want a BundleError naming line 7", err)
	}
	t.Logf("parse error: %v", err)
	// A line ovs-ofctl parses but ovs-vswitchd rejects: a group that does not exist.
	mods = roundFlows(1, 10)
	mods[3] = ovs.AddFlow("cookie=0x5, table=20, priority=300,ip,nw_dst=10.9.9.9 actions=group:77")
	err = of.Bundle(ctx, mods)
	if !errors.As(err, &be) || be.Line != 4 || !strings.Contains(be.Reason, "OFPBAC_BAD_OUT_GROUP") {
		t.Fatalf("Bundle with a rejected line = %v, want a BundleError naming line 4", err)
	}
	t.Logf("switch error: %v", err)
	if got := rig.Ofctl(t, "dump-flows", "br-int", "--no-stats"); strings.Contains(got, "actions") {
		t.Errorf("failed bundles left flows behind:\n%s", got)
	}
}

func TestDeleteFlowsByCookieMask(t *testing.T) {
	_, of, ctx := bridgeWithFlows(t)
	if err := of.Bundle(ctx, append(roundFlows(1, 50), roundFlows(2, 50)[:20]...)); err != nil {
		t.Fatal(err)
	}
	// Round 2 replaced 20 flows of round 1 (same match) and took their cookies.
	if err := of.DeleteFlows(ctx, cookie(1, 0), roundMask); err != nil {
		t.Fatal(err)
	}
	flows, err := of.DumpFlows(ctx, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(flows) != 20 {
		t.Fatalf("%d flows left, want the 20 of round 2", len(flows))
	}
	for _, f := range flows {
		if f.Cookie>>48 != 2 {
			t.Errorf("flow of round %d left: %s", f.Cookie>>48, f)
		}
	}
	if err := of.DeleteFlows(ctx, 0, 0); err == nil {
		t.Error("DeleteFlows with a zero mask succeeded, want a refusal")
	}
}

func TestStrictModsAndGroups(t *testing.T) {
	_, of, ctx := bridgeWithFlows(t)
	flow := "cookie=0x1000300000003, table=10, priority=200,ip,in_port=3 actions=goto_table:30"
	mods := []ovs.Mod{
		ovs.GroupMod{Op: ovs.GroupAdd, Group: "group_id=1,type=select,bucket=bucket_id:1,actions=output:3"},
		ovs.AddFlow(flow),
		ovs.AddFlow("table=10, priority=100,ip actions=group:1"),
		ovs.ModifyFlowStrict("table=10, priority=100,ip actions=drop"),
	}
	if err := of.Bundle(ctx, mods); err != nil {
		t.Fatal(err)
	}
	groups, err := of.DumpGroups(ctx)
	if err != nil || len(groups) != 1 || groups[0].ID != 1 || groups[0].Type != "select" {
		t.Fatalf("DumpGroups = %+v, %v", groups, err)
	}
	// A delete may be given the whole flow as rendered: cookie and actions included.
	if err := of.Bundle(ctx, []ovs.Mod{ovs.DeleteFlowStrict(flow)}); err != nil {
		t.Fatal(err)
	}
	flows, err := of.DumpFlows(ctx, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(flows) != 1 || flows[0].Actions != "drop" || flows[0].Priority != 100 {
		t.Fatalf("flows = %+v, want only the modified priority-100 flow", flows)
	}
}

func TestTraceAndTunnelNeighbor(t *testing.T) {
	rig, of, ctx := bridgeWithFlows(t)
	if err := of.Bundle(ctx, []ovs.Mod{ovs.AddFlow("table=0, priority=10,ip,nw_dst=10.244.1.5 actions=drop")}); err != nil {
		t.Fatal(err)
	}
	out, err := of.Trace(ctx, "in_port=1,ip,nw_src=10.244.1.4,nw_dst=10.244.1.5")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, "priority 10") || !strings.Contains(out, "Datapath actions: drop") {
		t.Errorf("trace does not show the flow and the verdict:\n%s", out)
	}
	if _, err := of.Trace(ctx, "in_port=1,tcp,nw_dst=10.244.1.5", "--ct-next", "trk,new"); err != nil {
		t.Errorf("trace with --ct-next: %v", err)
	}
	mac, _ := net.ParseMAC("02:31:00:00:00:02")
	if err := of.Vswitchd().TunnelNeighborSet(ctx, "br-int", netip.MustParseAddr("172.31.0.2"), mac); err != nil {
		t.Fatal(err)
	}
	if got := rig.Appctl(t, "tnl/neigh/show"); !strings.Contains(got, "02:31:00:00:00:02") {
		t.Errorf("tunnel neighbor not in tnl/neigh/show:\n%s", got)
	}
	_, err = ovs.NewVswitchd(ovs.VswitchdConfig{Ctl: of.Vswitchd().Ctl()}).Trace(ctx, "br-nope", "in_port=1")
	if err == nil || !strings.Contains(err.Error(), "unknown bridge") {
		t.Errorf("trace on a missing bridge = %v, want ovs-appctl's reason", err)
	}
}
