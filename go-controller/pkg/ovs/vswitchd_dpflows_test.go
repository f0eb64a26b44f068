package ovs

import (
	"strings"
	"testing"
)

func TestParseDatapathFlowsSkipsHeadingsAndListsAFlowOnce(t *testing.T) {
	out := `flow-dump from the main thread:
ufid:0e38c54c-f813-4153-8a83-76867c6bfbcd, ct_state(0x21/0x3f),recirc_id(0x1),in_port(pd),eth_type(0x0800),ipv4(src=10.244.1.13/0.0.0.0,dst=10.244.1.12,proto=17,frag=no), packets:0, bytes:0, used:never, dp:ovs, actions:ct(commit,zone=65520),pc, dp-extra-info:miniflow_bits(5,2)
flow-dump from pmd on cpu core: 1
ufid:0e38c54c-f813-4153-8a83-76867c6bfbcd, ct_state(0x21/0x3f),recirc_id(0x1),in_port(pd),eth_type(0x0800),ipv4(src=10.244.1.13/0.0.0.0,dst=10.244.1.12,proto=17,frag=no), packets:0, bytes:0, used:never, dp:ovs, actions:ct(commit,zone=65520),pc, dp-extra-info:miniflow_bits(5,2)
ufid:589cfa74-fa19-4208-bc60-d48159e84f30, recirc_id(0),in_port(pd),eth_type(0x0800),ipv4(frag=no), packets:1, bytes:58, used:0.022s, dp:ovs, actions:ct(zone=65520,nat),recirc(0x1)
`
	flows, err := ParseDatapathFlows(out)
	if err != nil {
		t.Fatal(err)
	}
	if len(flows) != 2 {
		t.Fatalf("%d flows, want 2: %+v", len(flows), flows)
	}
	f := flows[0]
	if f.UFID != "ufid:0e38c54c-f813-4153-8a83-76867c6bfbcd" ||
		f.Key != "ct_state(0x21/0x3f),recirc_id(0x1),in_port(pd),eth_type(0x0800),ipv4(src=10.244.1.13/0.0.0.0,dst=10.244.1.12,proto=17,frag=no)" ||
		!strings.HasPrefix(f.Actions, "ct(commit,zone=65520),pc") {
		t.Errorf("first flow: %+v", f)
	}
	if flows[1].Key != "recirc_id(0),in_port(pd),eth_type(0x0800),ipv4(frag=no)" || flows[1].Actions != "ct(zone=65520,nat),recirc(0x1)" {
		t.Errorf("second flow: %+v", flows[1])
	}
}

func TestParseDatapathFlowsRejectsWhatIsNoFlow(t *testing.T) {
	for _, line := range []string{
		"recirc_id(0),in_port(1), packets:1, bytes:2, used:never, actions:drop", // no UFID (dump-flows without -m)
		"ufid:1234, recirc_id(0),in_port(1)",                                    // no packets, no actions
	} {
		if _, err := ParseDatapathFlows(line); err == nil || !strings.Contains(err.Error(), line) {
			t.Errorf("%q: error %v, want one that quotes the line", line, err)
		}
	}
}
