package servicebench_test

import (
	"testing"

	"github.com/kovs-net/kovs/test/e2e/framework"
)

// TestOVSDiff checks, without OVS, how a change between two dumps is counted: counters
// and the agent round in the cookie are ignored, a rewritten flow or group counts once.
func TestOVSDiff(t *testing.T) {
	parse := func(flows, groups []string) ovsState {
		st := ovsState{flows: map[string]uint64{}, groups: map[string]bool{}}
		for _, line := range flows {
			f, ok := framework.ParseFlow(line)
			if !ok {
				t.Fatalf("not a flow: %q", line)
			}
			st.flows[f.Text] = f.Cookie
		}
		for _, g := range groups {
			st.groups[g] = true
		}
		return st
	}
	before := parse([]string{
		"cookie=0x1060000000001, duration=1.5s, table=40, n_packets=3, n_bytes=180, idle_age=1, priority=200,tcp,nw_dst=10.96.0.10,tp_dst=80 actions=group:100663297",
		"cookie=0x1060000000002, duration=1.5s, table=43, n_packets=0, n_bytes=0, priority=100,reg3=0x1 actions=ct(commit,nat(dst=10.244.1.2:8080))",
	}, []string{"group_id=100663297,type=select,bucket=bucket_id:0,actions=load:0x1->NXM_NX_REG3[]"})
	after := parse([]string{
		"cookie=0x2060000000001, duration=9.1s, table=40, n_packets=90, n_bytes=5400, idle_age=0, priority=200,tcp,nw_dst=10.96.0.10,tp_dst=80 actions=group:100663297",
		"cookie=0x2060000000002, duration=9.1s, table=43, n_packets=7, n_bytes=420, priority=100,reg3=0x1 actions=ct(commit,nat(dst=10.244.1.2:8080))",
		"cookie=0x2060000000002, duration=0.1s, table=43, n_packets=0, n_bytes=0, priority=100,reg3=0x2 actions=ct(commit,nat(dst=10.244.2.2:8080))",
	}, []string{"group_id=100663297,type=select,bucket=bucket_id:0,actions=load:0x1->NXM_NX_REG3[],bucket=bucket_id:1,actions=load:0x2->NXM_NX_REG3[]"})
	if flows, groups := before.diff(after); flows != 1 || groups != 1 {
		t.Errorf("diff = %d flows, %d groups; want 1 added flow and 1 rewritten group", flows, groups)
	}
	if flows, groups := before.diff(before); flows != 0 || groups != 0 {
		t.Errorf("diff with itself = %d flows, %d groups; want none", flows, groups)
	}
	if n := after.count(); n.flows != 3 || n.groups != 1 {
		t.Errorf("count = %+v; want 3 kovs flows and 1 group", n)
	}
}

// TestParseFlow checks what framework.ParseFlow keeps of a dumped flow.
func TestParseFlow(t *testing.T) {
	f, ok := framework.ParseFlow(" cookie=0x1060000000001, duration=1.5s, table=40, n_packets=3, n_bytes=180, idle_age=1, priority=200,tcp,nw_dst=10.96.0.10,tp_dst=80 actions=group:7")
	want := "table=40, priority=200,tcp,nw_dst=10.96.0.10,tp_dst=80 actions=group:7"
	if !ok || f.Cookie != 0x1060000000001 || f.Age.Seconds() != 1.5 || f.Text != want {
		t.Errorf("ParseFlow = %+v, %v; want cookie 0x1060000000001, age 1.5s, text %q", f, ok, want)
	}
	if f.Table != 40 || f.Priority != 200 {
		t.Errorf("ParseFlow: table %d, priority %d; want 40, 200", f.Table, f.Priority)
	}
	if f.Packets != 3 {
		t.Errorf("ParseFlow: %d packets; want 3", f.Packets)
	}
	if _, ok := framework.ParseFlow("NXST_FLOW reply (xid=0x4):"); ok {
		t.Error("a header line parsed as a flow")
	}
}
