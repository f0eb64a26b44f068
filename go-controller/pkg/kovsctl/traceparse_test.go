package kovsctl

import (
	"testing"

	"github.com/kovs-net/kovs/go-controller/pkg/ovs"
	"github.com/kovs-net/kovs/go-controller/pkg/pipeline"
)

// A real ofproto/trace (OVS 3.1) of a pod packet leaving through the tunnel.
const tunnelTrace = `Flow: tcp,in_port=3,vlan_tci=0x0000,dl_src=0a:58:0a:f4:00:02,dl_dst=0a:58:0a:f4:00:01,nw_src=10.244.0.2,nw_dst=10.244.1.3,nw_tos=0,nw_ecn=0,nw_ttl=64,nw_frag=no,tp_src=40000,tp_dst=80,tcp_flags=0

bridge("br-int")
----------------
 0. in_port=3, priority 200, cookie 0x1030000000003
    set_field:0x1/0xf->reg0
    goto_table:10
10. ip,in_port=3,dl_src=0a:58:0a:f4:00:02,nw_src=10.244.0.2, priority 200, cookie 0x1030000000003
    goto_table:30
30. ip, priority 100, cookie 0x1010000000000
    ct(table=31,zone=65520,nat)
    -> A clone of the packet is forked to recirculate. The forked pipeline will be resumed at table 31.

Final flow: unchanged
Megaflow: recirc_id=0,eth,ip,in_port=3
Datapath actions: ct(zone=65520,nat),recirc(0x5)

===============================================================================
recirc(0x5) - resume conntrack with ct_state=new|trk
===============================================================================

bridge("br-int")
----------------
31. priority 0, cookie 0x1010000000000
    goto_table:50
60. ip,nw_dst=10.244.1.0/24, priority 150, cookie 0x10400124e2d2d
    set_field:172.30.0.2->tun_dst
    set_field:0x1->reg1
    goto_table:61
90. priority 100, cookie 0x1010000000000
    output:NXM_NX_REG1[]
     -> output port is 1
     -> output to native tunnel
     -> tunneling to 172.30.0.2 via br-ex

Final flow: unchanged
Datapath actions: tnl_push(tnl_port(4),header(size=50)),out_port(1)),2
`

func TestParseTraceFollowsRecirculationToTheTunnel(t *testing.T) {
	tr := ovs.ParseTrace(tunnelTrace, Bridge)
	var tables []string
	for _, s := range tr.Steps {
		tables = append(tables, tableName(int(s.Table)))
	}
	want := []string{"Classifier", "SpoofGuard", "ConntrackZone", "ConntrackState", "L3Forwarding", "Output"}
	if len(tables) != len(want) {
		t.Fatalf("tables %v, want %v", tables, want)
	}
	for i := range want {
		if tables[i] != want[i] {
			t.Fatalf("tables %v, want %v", tables, want)
		}
	}
	if tr.TunnelDst != "172.30.0.2" || len(tr.OutputPorts) != 1 || tr.OutputPorts[0] != 1 || tr.Dropped() {
		t.Fatalf("tunnel %q ports %v dropped %v", tr.TunnelDst, tr.OutputPorts, tr.Dropped())
	}
	if c := pipeline.Cookie(tr.Steps[0].Cookie); c.Object() != 3 {
		t.Errorf("cookie of the first step %s", c)
	}
	// The trace resumed after conntrack once, before ConntrackState (the fourth step).
	if len(tr.Continuations) != 1 || tr.Continuations[0] != (ovs.TraceContinuation{Step: 3, CtState: "new|trk"}) {
		t.Errorf("continuations %+v, want one before step 3 with new|trk", tr.Continuations)
	}
}

func TestParseTraceDrop(t *testing.T) {
	tr := ovs.ParseTrace(" 0. priority 0, cookie 0x1010000000000\n    drop\n\nDatapath actions: drop\n", Bridge)
	if !tr.Dropped() {
		t.Fatal("not dropped")
	}
	if s, _ := tr.LastStep(); tableName(int(s.Table)) != "Classifier" {
		t.Fatalf("last step %+v", s)
	}
}

func TestShortAction(t *testing.T) {
	for in, want := range map[string]string{
		"set_field:172.30.0.2->tun_dst":                "tun_dst=172.30.0.2",
		"set_field:0x1/0xf->reg0":                      "reg0=0x1/0xf",
		"set_field:0a:58:0a:f4:00:01->eth_src":         "eth_src=0a:58:0a:f4:00:01",
		"set_field:fd00:172:31::3->tun_ipv6_dst":       "tun_ipv6_dst=fd00:172:31::3",
		"goto_table:61":                                "goto_table:61",
		"ct(commit,zone=65520,nat(dst=10.96.0.10:53))": "ct(commit,zone=65520,nat(dst=10.96.0.10:53))",
	} {
		if got := shortAction(in); got != want {
			t.Errorf("shortAction(%q) = %q, want %q", in, got, want)
		}
	}
}

// A real ofproto/trace (OVS 3.1) tail of a pod's packet to its own address through the
// gateway: the output to the port it came in on is skipped, so nothing is sent.
const selfTrace = `bridge("br-int")
----------------
 0. in_port=4, priority 200, cookie 0x1030000000004
    set_field:0x1/0xf->reg0
    goto_table:10
90. priority 100, cookie 0x1010000000000
    output:NXM_NX_REG1[]
     -> output port is 4
     >> skipping output to input port

Final flow: unchanged
Megaflow: recirc_id=0x4b,eth,udp6,in_port=4
Datapath actions: drop
`

func TestParseTraceOutputToInputPortIsADrop(t *testing.T) {
	tr := ovs.ParseTrace(selfTrace, "br-int")
	if !tr.Dropped() || len(tr.OutputPorts) != 0 {
		t.Errorf("output to the input port without in_port: dropped=%v outputs %v, want a drop", tr.Dropped(), tr.OutputPorts)
	}
}
