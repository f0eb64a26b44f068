package ovs

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strings"
	"testing"
)

func newTestOpenFlow(t *testing.T, fx *fakeExec) *OpenFlow {
	t.Helper()
	of, err := NewOpenFlow(OpenFlowConfig{Bridge: "br-int", RunDir: "/run/kovs", Exec: fx})
	if err != nil {
		t.Fatal(err)
	}
	return of
}

func TestBundleSendsAllModsInOneRun(t *testing.T) {
	fx := newFakeExec().on("bundle", fakeAnswer{})
	of := newTestOpenFlow(t, fx)
	mods := []Mod{
		GroupMod{Op: GroupAdd, Group: "group_id=1,type=select,bucket=actions=output:3"},
		AddFlow("cookie=0x1, table=10, priority=200,ip actions=group:1"),
		DeleteFlowStrict("cookie=0x2, table=10, priority=100,ip actions=drop"),
	}
	if err := of.Bundle(context.Background(), mods); err != nil {
		t.Fatal(err)
	}
	runs := fx.ran("bundle")
	if len(runs) != 1 {
		t.Fatalf("%d ovs-ofctl bundle runs, want one", len(runs))
	}
	// Without --no-names ovs-ofctl first fetches every port's and table's name from
	// the switch, which costs more than the bundle itself.
	if !slices.Contains(runs[0].Args, "--no-names") {
		t.Errorf("ovs-ofctl %s: want --no-names (kovs's mods name no ports or tables)", strings.Join(runs[0].Args, " "))
	}
	got := strings.Split(strings.TrimSpace(string(runs[0].Stdin)), "\n")
	want := []string{
		"group add group_id=1,type=select,bucket=actions=output:3",
		"flow add cookie=0x1, table=10, priority=200,ip actions=group:1",
		"flow delete_strict cookie=0x2/-1,table=10,priority=100,ip",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("bundle file:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

func TestBundleOfNothingRunsNothing(t *testing.T) {
	fx := newFakeExec()
	if err := newTestOpenFlow(t, fx).Bundle(context.Background(), nil); err != nil {
		t.Fatal(err)
	}
	if len(fx.runs) != 0 {
		t.Errorf("ran %v for an empty bundle", fx.runs)
	}
}

func TestBundleRefusesBadModsBeforeRunning(t *testing.T) {
	for name, mod := range map[string]Mod{
		"two lines":     AddFlow("priority=1 actions=drop\nflow delete"),
		"unknown op":    FlowMod{Op: "replace", Flow: "priority=1 actions=drop"},
		"empty add":     AddFlow("  "),
		"unknown group": GroupMod{Op: "remove", Group: "group_id=1"},
		"nil":           nil,
	} {
		t.Run(name, func(t *testing.T) {
			fx := newFakeExec()
			err := newTestOpenFlow(t, fx).Bundle(context.Background(), []Mod{AddFlow("priority=1 actions=drop"), mod})
			if err == nil || !strings.Contains(err.Error(), "line 2") {
				t.Errorf("Bundle = %v, want an error naming line 2", err)
			}
			if len(fx.runs) != 0 {
				t.Errorf("ran ovs-ofctl for an invalid bundle")
			}
		})
	}
}

func TestBundleErrorNamesTheLine(t *testing.T) {
	mods := []Mod{
		AddFlow("table=20, priority=200,ip,nw_dst=10.244.0.2 actions=drop"),
		AddFlow("cookie=0x5, table=20, priority=300,ip,nw_dst=10.9.9.9 actions=group:77"),
		AddFlow("table=20, priority=200,ip,nw_dst=10.244.0.3 actions=drop"),
	}
	cases := []struct {
		name, stderr string
		line         int
		reason       string
	}{
		{"parse error", "ovs-ofctl: -:3: 10.244.0.300: invalid IP address\n", 3, "invalid IP address"},
		{"switch error", "Error OFPBAC_BAD_OUT_GROUP for: OFPT_FLOW_MOD (OF1.5) (xid=0x7): ADD table:20 priority=300,ip,nw_dst=10.9.9.9 cookie:0x5 actions=group:77\n" +
			"Error OFPBFC_MSG_FAILED for: OFPT_BUNDLE_CONTROL (OF1.5) (xid=0xa):\n bundle_id=0 type=COMMIT_REQUEST flags=atomic ordered\n" +
			"ovs-ofctl: talking to unix:/run/kovs/br-int.mgmt (Protocol error)\n", 2, "OFPBAC_BAD_OUT_GROUP"},
		{"no line", "ovs-ofctl: unix:/run/kovs/br-int.mgmt: failed to connect to socket (No such file or directory)\n", 0, "failed to connect"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			fx := newFakeExec().fail("bundle", tc.stderr)
			err := newTestOpenFlow(t, fx).Bundle(context.Background(), mods)
			var be *BundleError
			if !errors.As(err, &be) {
				t.Fatalf("Bundle = %v, want a *BundleError", err)
			}
			if be.Line != tc.line || !strings.Contains(be.Reason, tc.reason) {
				t.Errorf("BundleError line %d reason %q, want line %d reason containing %q", be.Line, be.Reason, tc.line, tc.reason)
			}
			if tc.line > 0 && !strings.Contains(err.Error(), fmt.Sprintf("line %d (flow add", tc.line)) {
				t.Errorf("error %q does not quote the line", err)
			}
		})
	}
}

func TestSwitchErrorOnIdenticalLinesNamesNoLine(t *testing.T) {
	stderr := "Error OFPBAC_BAD_OUT_GROUP for: OFPT_FLOW_MOD (OF1.5) (xid=0x7): ADD priority=1 actions=group:7\n"
	fx := newFakeExec().fail("bundle", stderr)
	mods := []Mod{AddFlow("priority=1 actions=group:7"), AddFlow("priority=1 actions=group:7")}
	var be *BundleError
	if err := newTestOpenFlow(t, fx).Bundle(context.Background(), mods); !errors.As(err, &be) || be.Line != 0 {
		t.Fatalf("Bundle = %v, want a BundleError without a line", err)
	}
}

func TestDumpFlowsParsesAndFilters(t *testing.T) {
	dump := "OFPST_FLOW reply (OF1.5) (xid=0x2):\n" +
		" cookie=0x1000300000003, duration=5.1s, table=10, n_packets=7, n_bytes=686, idle_age=1, priority=200,ip,in_port=3 actions=goto_table:30\n"
	fx := newFakeExec().on("dump-flows", fakeAnswer{stdout: dump})
	flows, err := newTestOpenFlow(t, fx).DumpFlows(context.Background(), 0x1000000000000, 0xffff000000000000)
	if err != nil {
		t.Fatal(err)
	}
	want := FlowEntry{Cookie: 0x1000300000003, Table: 10, Priority: 200, Match: "ip,in_port=3", Actions: "goto_table:30", Packets: 7, Bytes: 686}
	if len(flows) != 1 || flows[0] != want {
		t.Errorf("DumpFlows = %+v, want %+v", flows, want)
	}
	if args := strings.Join(fx.ran("dump-flows")[0].Args, " "); !strings.Contains(args, "cookie=0x1000000000000/0xffff000000000000") {
		t.Errorf("dump-flows does not filter by cookie: %s", args)
	}
}

func TestDumpFlowsReportsFailures(t *testing.T) {
	fx := newFakeExec().fail("dump-flows", "ovs-ofctl: br-int is not a bridge or a socket")
	_, err := newTestOpenFlow(t, fx).DumpFlows(context.Background(), 0, 0)
	if err == nil || !strings.Contains(err.Error(), "is not a bridge or a socket") {
		t.Errorf("DumpFlows = %v, want ovs-ofctl's stderr", err)
	}
	fx = newFakeExec().on("dump-flows", fakeAnswer{stdout: " cookie=0x0, table=0, priority=1 drop\n"})
	if _, err := newTestOpenFlow(t, fx).DumpFlows(context.Background(), 0, 0); err == nil {
		t.Error("DumpFlows accepted a line without actions")
	}
}

func TestDeleteFlowsByCookie(t *testing.T) {
	fx := newFakeExec().on("bundle", fakeAnswer{})
	of := newTestOpenFlow(t, fx)
	if err := of.DeleteFlows(context.Background(), 0, 0); err == nil {
		t.Error("DeleteFlows with a zero mask succeeded")
	}
	if err := of.DeleteFlows(context.Background(), 0x2000000000000, 0xffff000000000000); err != nil {
		t.Fatal(err)
	}
	runs := fx.ran("bundle")
	if len(runs) != 1 || strings.TrimSpace(string(runs[0].Stdin)) != "flow delete cookie=0x2000000000000/0xffff000000000000" {
		t.Errorf("DeleteFlows ran %v", runs)
	}
}

func TestDumpGroups(t *testing.T) {
	fx := newFakeExec().on("dump-groups", fakeAnswer{stdout: "OFPST_GROUP_DESC reply (OF1.5) (xid=0x2):\n group_id=7,type=all,bucket=bucket_id:0,actions=output:1\n"})
	groups, err := newTestOpenFlow(t, fx).DumpGroups(context.Background())
	if err != nil || len(groups) != 1 || groups[0].ID != 7 || groups[0].Type != "all" {
		t.Errorf("DumpGroups = %+v, %v", groups, err)
	}
}

func TestTraceAndTunnelNeighbor(t *testing.T) {
	fx := newFakeExec().
		on("ofproto/trace", fakeAnswer{stdout: "Flow: ip,in_port=1\n...\nDatapath actions: drop\n"}).
		on("tnl/neigh/set", fakeAnswer{stdout: "OK\n"})
	of := newTestOpenFlow(t, fx)
	out, err := of.Trace(context.Background(), "in_port=1,ip", "--ct-next", "trk,new")
	if err != nil || !strings.Contains(out, "Datapath actions: drop") {
		t.Fatalf("Trace = %q, %v", out, err)
	}
	trace := fx.ran("ofproto/trace")[0]
	if !strings.Contains(strings.Join(trace.Env, " "), "OVS_RUNDIR=/run/kovs") {
		t.Errorf("ovs-appctl does not look for ovs-vswitchd in the run directory: env %v", trace.Env)
	}
	mac, _ := net.ParseMAC("02:31:00:00:00:02")
	ip := netip.MustParseAddr("172.31.0.2")
	if err := of.Vswitchd().TunnelNeighborSet(context.Background(), "br-ex", ip, mac); err != nil {
		t.Fatal(err)
	}
	if err := of.Vswitchd().TunnelNeighborSet(context.Background(), "br-ex", netip.Addr{}, mac); err == nil {
		t.Error("TunnelNeighborSet accepted no IP")
	}
	if _, err := of.Trace(context.Background(), " "); err == nil {
		t.Error("Trace accepted an empty flow")
	}
}

func TestTraceReportsStderr(t *testing.T) {
	fx := newFakeExec().fail("ofproto/trace", "br-nope: unknown bridge\novs-appctl: ovs-vswitchd.ctl: server returned an error")
	_, err := NewVswitchd(VswitchdConfig{Ctl: "/run/kovs/ovs-vswitchd.ctl", Exec: fx}).Trace(context.Background(), "br-nope", "in_port=1")
	if err == nil || !strings.Contains(err.Error(), "unknown bridge") {
		t.Errorf("Trace = %v, want the reason ovs-appctl gave", err)
	}
}

func TestCanceledContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	fx := newFakeExec().on("dump-flows", fakeAnswer{})
	_, err := newTestOpenFlow(t, fx).DumpFlows(ctx, 0, 0)
	if !errors.Is(err, context.Canceled) {
		t.Errorf("DumpFlows with a canceled context = %v, want context.Canceled", err)
	}
}

func TestNewOpenFlowTargets(t *testing.T) {
	for _, tc := range []struct {
		cfg  OpenFlowConfig
		want string
	}{
		{OpenFlowConfig{Bridge: "br-int", RunDir: "/run/kovs"}, "unix:/run/kovs/br-int.mgmt"},
		{OpenFlowConfig{Bridge: "br-int"}, "br-int"},
		{OpenFlowConfig{Bridge: "br-int", RunDir: "/x", Target: "tcp:127.0.0.1:6653"}, "tcp:127.0.0.1:6653"},
	} {
		of, err := NewOpenFlow(tc.cfg)
		if err != nil || of.Target() != tc.want {
			t.Errorf("NewOpenFlow(%+v) target %q, %v; want %q", tc.cfg, of.Target(), err, tc.want)
		}
	}
	if _, err := NewOpenFlow(OpenFlowConfig{}); err == nil {
		t.Error("NewOpenFlow without a bridge succeeded")
	}
}
