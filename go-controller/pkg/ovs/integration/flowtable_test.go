package integration

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kovs-net/kovs/go-controller/pkg/ovs"
	"github.com/kovs-net/kovs/go-controller/pkg/ovs/ovstest"
)

// TestLimitFlowTablesBoundsATable: a table limited to 20 flows with eviction holds at most
// 20, however many flows with timeouts are added (the newest stay, the oldest go), and
// from the largest eviction group first; the limit is written once (the second call finds
// it in place) and survives an ovs-vswitchd restart (issue 14).
func TestLimitFlowTablesBoundsATable(t *testing.T) {
	rig := ovstest.Start(t)
	ctx := testContext(t)
	db := connect(t, ctx, rig)
	if err := db.EnsureBridge(ctx, brIntSpec()); err != nil {
		t.Fatal(err)
	}
	limits := map[int]ovs.FlowTableLimit{32: {FlowLimit: 20, Evict: true, Groups: []string{"NXM_OF_IP_DST[]"}}}
	for range 2 {
		if err := db.LimitFlowTables(ctx, "br-int", limits); err != nil {
			t.Fatal(err)
		}
	}
	if got := rig.Vsctl(t, "--columns=flow_limit,overflow_policy,groups", "list", "Flow_Table"); !strings.Contains(got, "20") ||
		!strings.Contains(got, "evict") || !strings.Contains(got, "NXM_OF_IP_DST[]") || strings.Count(got, "flow_limit") != 1 {
		t.Fatalf("Flow_Table rows:\n%s", got)
	}
	// A flooder (destination 10.244.1.66) adds 60 flows after a victim's (10.244.1.10) 5,
	// which would expire first (60 s idle, the flooder's 100 s): the group decides.
	var flows []string
	for i := range 5 {
		flows = append(flows, fmt.Sprintf("table=32,idle_timeout=60,priority=100,sctp,nw_src=10.244.3.%d,nw_dst=10.244.1.10,actions=drop", i+1))
	}
	for i := range 60 {
		flows = append(flows, fmt.Sprintf("table=32,idle_timeout=100,priority=100,sctp,nw_src=10.244.4.%d,nw_dst=10.244.1.66,actions=drop", i+1))
	}
	file := filepath.Join(t.TempDir(), "flows")
	if err := os.WriteFile(file, []byte(strings.Join(flows, "\n")+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	rig.Ofctl(t, "add-flows", "br-int", file)
	dump := rig.Ofctl(t, "dump-flows", "br-int", "table=32")
	if n := strings.Count(dump, "table=32"); n != 20 {
		t.Errorf("table 32 holds %d flows, want the limit, 20:\n%s", n, dump)
	}
	if n := strings.Count(dump, "nw_dst=10.244.1.10"); n != 5 {
		t.Errorf("the flooder evicted the victim's flows: %d of 5 left", n)
	}
	rig.StopVswitchd(t)
	rig.StartVswitchd(t)
	mgmt := filepath.Join(rig.Dir, "br-int.mgmt")
	for deadline := time.Now().Add(15 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if _, err := os.Stat(mgmt); err == nil {
			break
		}
	}
	rig.Ofctl(t, "add-flows", "br-int", file)
	if n := strings.Count(rig.Ofctl(t, "dump-flows", "br-int", "table=32"), "table=32"); n != 20 {
		t.Errorf("after an ovs-vswitchd restart table 32 holds %d flows, want 20", n)
	}
}
