package ovs

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestFlowRendersAsDumpFlowsAndParsesBack(t *testing.T) {
	for _, f := range []Flow{
		{FlowKey: FlowKey{Table: 10, Priority: 200, Match: "ip,in_port=3"}, Cookie: 0x1000300000003, Actions: "goto_table:30"},
		{FlowKey: FlowKey{Priority: 0}, Cookie: 0x1010000000000, Actions: "drop"},
		{FlowKey: FlowKey{Table: 70, Priority: 100, Match: "conj_id=7"}, Actions: "goto_table:80"},
	} {
		e, err := ParseFlow(f.String())
		if err != nil {
			t.Fatalf("ParseFlow(%q): %v", f, err)
		}
		back, err := e.Flow()
		if err != nil || back != f {
			t.Errorf("%q parsed back as %+v, %v; want %+v", f, back, err, f)
		}
	}
	if got := (Flow{FlowKey: FlowKey{Table: 10, Priority: 200, Match: "ip"}, Cookie: 1, Actions: "drop"}).String(); got != "cookie=0x1, table=10, priority=200,ip actions=drop" {
		t.Errorf("String() = %q", got)
	}
	if _, err := (FlowEntry{Table: -1, TableName: "Classifier", Priority: 1, Actions: "drop"}).Flow(); err == nil {
		t.Error("a flow with a named table converted")
	}
}

func TestTypedModsRenderAsTheTextModsDo(t *testing.T) {
	flow := Flow{FlowKey: FlowKey{Table: 10, Priority: 200, Match: "ip,in_port=3"}, Cookie: 0x1000300000003, Actions: "goto_table:30"}
	group := Group{ID: 7, Type: "select", Method: "hash", Fields: []string{"ip_src", "ip_dst"},
		Buckets: []Bucket{{ID: 0, Actions: "output:3"}, {ID: 1, Actions: "output:4"}}}
	for _, tc := range []struct {
		mod  Mod
		want string
	}{
		{flow.Add(), "flow add cookie=0x1000300000003, table=10, priority=200,ip,in_port=3 actions=goto_table:30"},
		{flow.FlowKey.DeleteStrict(), "flow delete_strict table=10,priority=200,ip,in_port=3"},
		{FlowKey{Priority: 5}.DeleteStrict(), "flow delete_strict table=0,priority=5"},
		{group.Add(), "group add group_id=7,type=select,selection_method=hash,fields(ip_src,ip_dst),bucket=bucket_id:0,actions=output:3,bucket=bucket_id:1,actions=output:4"},
		{group.Modify(), "group modify " + group.String()},
		{DeleteGroup(7), "group delete group_id=7"},
	} {
		got, err := BundleText([]Mod{tc.mod})
		if err != nil || strings.TrimSuffix(got, "\n") != tc.want {
			t.Errorf("BundleText(%+v) = %q, %v; want %q", tc.mod, got, err, tc.want)
		}
	}
}

// TestParseGroupRoundTripsTheGoldenGroups: every group of the golden bundles, which
// check-goldens.sh shows OVS dumps exactly as written, parses and renders back.
func TestParseGroupRoundTripsTheGoldenGroups(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("..", "..", "..", "ovs-flows", "golden", "*.bundle"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no golden bundles: %v", err)
	}
	n := 0
	for _, file := range files {
		data, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(string(data), "\n") {
			text, ok := strings.CutPrefix(line, "group add ")
			if !ok {
				continue
			}
			n++
			g, err := ParseGroup(text)
			if err != nil || g.String() != text {
				t.Errorf("ParseGroup(%q) = %q, %v", text, g, err)
			}
			if e := (GroupEntry{ID: g.ID, Type: g.Type, Text: text}); !mustGroup(t, e).Equal(g) {
				t.Errorf("GroupEntry.Group of %q differs", text)
			}
		}
	}
	if n == 0 {
		t.Fatal("the golden bundles hold no group")
	}
	for _, bad := range []string{"type=select", "group_id=x,type=all", "group_id=1,type=all,bucket=actions=drop", "group_id=1,weight=3"} {
		if _, err := ParseGroup(bad); err == nil {
			t.Errorf("ParseGroup(%q) succeeded", bad)
		}
	}
}

func mustGroup(t *testing.T, e GroupEntry) Group {
	t.Helper()
	g, err := e.Group()
	if err != nil {
		t.Fatal(err)
	}
	return g
}

func TestMatchFieldsAndConjunctions(t *testing.T) {
	match := "ip,reg1=0x5,nw_src=10.0.0.0/8"
	if got := MatchFields(match); len(got) != 3 || got[0] != (MatchField{Name: "ip"}) || got[1] != (MatchField{"reg1", "0x5"}) {
		t.Errorf("MatchFields(%q) = %v", match, got)
	}
	if v, ok := MatchValue(match, "nw_src"); !ok || v != "10.0.0.0/8" {
		t.Errorf("MatchValue nw_src = %q, %v", v, ok)
	}
	if _, ok := MatchValue(match, "conj_id"); ok {
		t.Error("MatchValue found a field the match lacks")
	}
	if got := ConjunctionIDs("conjunction(12,1/2),conjunction(77,1/3)"); len(got) != 2 || got[0] != 12 || got[1] != 77 {
		t.Errorf("ConjunctionIDs = %v", got)
	}
	if got := ConjunctionIDs("goto_table:80"); len(got) != 0 {
		t.Errorf("ConjunctionIDs of no conjunction = %v", got)
	}
}

// A learn action renders as dump-flows prints it: the learned flow's head in OVS's order,
// no cookie when 0, then the specs.
func TestLearnRendersAsDumpFlows(t *testing.T) {
	for _, tc := range []struct {
		l    Learn
		want string
	}{
		{Learn{Table: 32, IdleTimeout: 60, Priority: 100, Cookie: 0x1010000000000, EthType: 0x0800, IPProto: 132,
			Specs: []string{"NXM_OF_IP_SRC[]=NXM_OF_IP_DST[]", "load:0x1->NXM_NX_REG0[8..9]"}},
			"learn(table=32,idle_timeout=60,priority=100,cookie=0x1010000000000,eth_type=0x800,nw_proto=132," +
				"NXM_OF_IP_SRC[]=NXM_OF_IP_DST[],load:0x1->NXM_NX_REG0[8..9])"},
		{Learn{Table: 45, IdleTimeout: 10800, Priority: 200, EthType: 0x86dd, IPProto: 6},
			"learn(table=45,idle_timeout=10800,priority=200,eth_type=0x86dd,nw_proto=6)"},
	} {
		if got := tc.l.String(); got != tc.want {
			t.Errorf("String() = %q, want %q", got, tc.want)
		}
	}
}

func TestFlowKeySelection(t *testing.T) {
	for _, c := range []struct {
		key  FlowKey
		want string
	}{
		{FlowKey{Table: 70, Priority: 50, Match: "reg1=0x3"}, "table=70,reg1=0x3"},
		{FlowKey{Table: 0, Priority: 10}, "table=0"},
	} {
		if got := c.key.Selection(); got != c.want {
			t.Errorf("%+v.Selection() = %q, want %q", c.key, got, c.want)
		}
	}
}
