package integration

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/kovs-net/kovs/go-controller/pkg/ovs"
	"github.com/kovs-net/kovs/go-controller/pkg/ovs/ovstest"
)

// DeleteDatapathFlows deletes the flows it names over one unixctl connection and leaves
// the others; a flow already gone (expired, or deleted by a revalidator since the dump) is
// no error; with ovs-vswitchd unreachable it is one, which the agent must see: a policy
// change whose stale flows were not deleted is not in force. The socket is found as
// ovs-ctl names it (after the pid), again after a restart that changes it.
func TestDeleteDatapathFlows(t *testing.T) {
	rig := ovstest.StartDatabase(t)
	rig.Vsctl(t, "--no-wait", "init")
	rig.StartVswitchdAsOVSCtl(t)
	rig.Vsctl(t, "add-br", "br-int", "--", "set", "bridge", "br-int", "datapath_type=netdev", "fail_mode=secure")
	v := ovs.NewVswitchd(ovs.VswitchdConfig{Ctl: "ovs-vswitchd", RunDir: rig.Dir})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	// The revalidators would delete flows that no upcall made.
	rig.Appctl(t, "revalidator/pause")
	ufids := addDatapathFlows(t, ctx, rig, 10)
	const gone = "ufid:0e38c54c-f813-4153-8a83-76867c6bfbcd"
	if err := v.DeleteDatapathFlows(ctx, append([]string{gone}, ufids[:6]...)); err != nil {
		t.Fatalf("six flows and one the datapath does not hold: %v, want no error", err)
	}
	flows, err := v.DumpDatapathFlows(ctx)
	if err != nil {
		t.Fatal(err)
	}
	left := map[string]bool{}
	for _, f := range flows {
		left[f.UFID] = true
	}
	for i, ufid := range ufids {
		if left[ufid] == (i < 6) {
			t.Errorf("flow %d (%s): present after the deletion = %v, want %v", i, ufid, left[ufid], i >= 6)
		}
	}

	rig.StopVswitchd(t)
	if err := v.DeleteDatapathFlows(ctx, ufids[6:]); err == nil {
		t.Error("ovs-vswitchd stopped: no error")
	}
	rig.StartVswitchdAsOVSCtl(t)
	rig.Vsctl(t, "--may-exist", "add-br", "br-int")
	ufids = addDatapathFlows(t, ctx, rig, 2)
	if err := v.DeleteDatapathFlows(ctx, ufids); err != nil {
		t.Errorf("after a restart (a new pid-named socket): %v", err)
	}
}

// addDatapathFlows adds n datapath flows to br-int's datapath (dpctl/add-flow, over one
// connection) and returns their UFIDs.
func addDatapathFlows(t testing.TB, ctx context.Context, rig *ovstest.Rig, n int) []string {
	t.Helper()
	ctl, err := ovs.DialUnixctl(ctx, rig.VswitchdCtl, rig.Dir)
	if err != nil {
		t.Fatal(err)
	}
	defer ctl.Close()
	var ufids []string
	params := make([][]string, n)
	for i := range n {
		ufid := fmt.Sprintf("ufid:%08x-0000-4000-8000-000000000000", i+1)
		ufids = append(ufids, ufid)
		params[i] = []string{fmt.Sprintf("%s,in_port(1),eth(src=0a:58:0a:f4:01:0d,dst=0a:58:0a:f4:01:01),eth_type(0x0800),"+
			"ipv4(src=10.244.%d.%d,dst=10.244.1.12,proto=17,tos=0,ttl=64,frag=no),udp(src=1,dst=80)", ufid, 2+i/250, 1+i%250), "drop"}
	}
	errs, err := ctl.CallEach(ctx, "dpctl/add-flow", params)
	if err != nil {
		t.Fatal(err)
	}
	for i, err := range errs {
		if err != nil {
			t.Fatalf("dpctl/add-flow %s: %v", strings.Join(params[i], " "), err)
		}
	}
	return ufids
}

// BenchmarkDeleteDatapathFlows deletes 200 datapath flows per op over one unixctl
// connection, and as before, one ovs-appctl process per flow; and 1,000 (maxDatapathDeletes
// of the agent's narrow invalidation) over one connection. Reported as measured, never
// asserted.
func BenchmarkDeleteDatapathFlows(b *testing.B) {
	const n = 200
	rig := ovstest.Start(b)
	rig.Vsctl(b, "add-br", "br-int", "--", "set", "bridge", "br-int", "datapath_type=netdev", "fail_mode=secure")
	rig.Appctl(b, "revalidator/pause")
	v := ovs.NewVswitchd(ovs.VswitchdConfig{Ctl: rig.VswitchdCtl, RunDir: rig.Dir})
	ctx := context.Background()
	for _, n := range []int{n, 1000} {
		b.Run(fmt.Sprintf("unixctl-%d", n), func(b *testing.B) {
			for b.Loop() {
				b.StopTimer()
				ufids := addDatapathFlows(b, ctx, rig, n)
				b.StartTimer()
				if err := v.DeleteDatapathFlows(ctx, ufids); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
	b.Run(fmt.Sprintf("ovs-appctl-%d", n), func(b *testing.B) {
		for b.Loop() {
			b.StopTimer()
			ufids := addDatapathFlows(b, ctx, rig, n)
			b.StartTimer()
			for _, ufid := range ufids {
				rig.Appctl(b, "dpctl/del-flow", ufid)
			}
		}
	})
}
