package agent

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kovs-net/kovs/go-controller/pkg/ovs"
)

func TestTouchesPolicyFindsPolicyTablesOnly(t *testing.T) {
	for _, tc := range []struct {
		texts []string
		want  bool
	}{
		{[]string{"table=70,priority=100,reg1=0x5"}, true},
		{[]string{"cookie=0x1, table=50, priority=50,in_port=3 actions=drop"}, true},
		// ClusterNetworkPolicy's tables (the cluster policy stage) are policy too.
		{[]string{"table=65,priority=60000,conj_id=7"}, true},
		{[]string{"table=55,priority=60000,in_port=3"}, true},
		{[]string{"cookie=0x1, table=60, priority=200,ip,nw_dst=10.0.0.2 actions=goto_table:61"}, false},
		{[]string{"priority=0 actions=drop"}, false},
		{nil, false},
	} {
		if got := touchesPolicy(keysOf(t, tc.texts)); got != tc.want {
			t.Errorf("touchesPolicy(%q) = %v, want %v", tc.texts, got, tc.want)
		}
	}
}

// keysOf are the keys of flows or strict-delete selections given as ovs-ofctl text.
func keysOf(t *testing.T, texts []string) []ovs.FlowKey {
	t.Helper()
	var keys []ovs.FlowKey
	for _, text := range texts {
		if !strings.Contains(text, "actions=") {
			text += " actions=drop" // a delete's selection: the key is all there is
		}
		keys = append(keys, dumpedFlow(t, text).FlowKey)
	}
	return keys
}

// recordingCaches records the cache invalidations and flow deletions, in order; its
// datapath holds dp, and deleting a datapath flow fails with delErr.
type recordingCaches struct {
	calls  []string
	dp     []ovs.DatapathFlow
	delErr error
}

func (r *recordingCaches) DumpDatapathFlows(context.Context) ([]ovs.DatapathFlow, error) {
	r.calls = append(r.calls, "dump-flows")
	return r.dp, nil
}

func (r *recordingCaches) DeleteDatapathFlows(_ context.Context, ufids []string) error {
	r.calls = append(r.calls, "del-flows "+strings.Join(ufids, " "))
	return r.delErr
}

func (r *recordingCaches) FlushConntrack(_ context.Context, zone uint16, ipProto uint8) error {
	r.calls = append(r.calls, fmt.Sprintf("flush-conntrack zone=%d ct_nw_proto=%d", zone, ipProto))
	return nil
}

func (r *recordingCaches) PurgeDatapathFlows(context.Context) error {
	r.calls = append(r.calls, "purge")
	return nil
}

func (r *recordingCaches) DeleteFlows(_ context.Context, cookie, mask uint64) error {
	r.calls = append(r.calls, fmt.Sprintf("del-flows cookie=%#x/%#x", cookie, mask))
	return nil
}

// TestPolicyChangeDeletesLearnedSCTPRepliesAfterTheDatapathFlows: only the replies (kind
// 0, object 0), not the learned translations of stateless SCTP Services. With
// --datapath-invalidation=purge every datapath flow is purged and none is dumped; with
// narrow, the stale ones are dumped and deleted in one batch.
func TestPolicyChangeDeletesLearnedSCTPRepliesAfterTheDatapathFlows(t *testing.T) {
	for _, mode := range []string{DatapathInvalidationPurge, DatapathInvalidationNarrow} {
		for _, netdev := range []bool{true, false} {
			r := &recordingCaches{dp: []ovs.DatapathFlow{{UFID: "ufid:1", Key: newConnFlow}}}
			a := &Agent{cfg: Config{DatapathInvalidation: mode}, netdev: netdev}
			if err := invalidatePolicyCaches(context.Background(), r, r, a.netdev, a.narrowInvalidation(context.Background(), nil)); err != nil {
				t.Fatal(err)
			}
			want := []string{"purge", "del-flows cookie=0x800000000000/0xffffffffffff"}
			if mode == DatapathInvalidationNarrow {
				want = []string{"dump-flows", "del-flows ufid:1", "del-flows cookie=0x800000000000/0xffffffffffff"}
			}
			if netdev {
				want = append([]string{"flush-conntrack zone=65520 ct_nw_proto=132"}, want...)
			}
			if !slices.Equal(r.calls, want) {
				t.Errorf("--datapath-invalidation=%s, netdev=%v: %q, want %q", mode, netdev, r.calls, want)
			}
		}
	}
}

// TestConfigDatapathInvalidation: empty is purge, auto, purge and narrow are taken,
// anything else is refused with an error naming the flag and its values.
func TestConfigDatapathInvalidation(t *testing.T) {
	valid := func(mode string) Config {
		c := Config{NodeName: "node1", OVSDB: "unix:/run/db.sock", ClusterCIDRs: []netip.Prefix{netip.MustParsePrefix("10.244.0.0/16")},
			CNISocket: "/run/kovs/cni.sock", DatapathInvalidation: mode}
		c.Defaults()
		return c
	}
	if c := valid(""); c.DatapathInvalidation != DatapathInvalidationPurge || c.Validate() != nil {
		t.Errorf("unset: %q (%v), want purge and valid", c.DatapathInvalidation, c.Validate())
	}
	for _, mode := range []string{DatapathInvalidationAuto, DatapathInvalidationPurge, DatapathInvalidationNarrow} {
		if c := valid(mode); c.DatapathInvalidation != mode || c.Validate() != nil {
			t.Errorf("%s: %q (%v), want it kept and valid", mode, c.DatapathInvalidation, c.Validate())
		}
	}
	for _, bad := range []string{"Narrow", "selective", "none"} {
		c := valid(bad)
		if err := c.Validate(); err == nil || !strings.Contains(err.Error(), fmt.Sprintf("--datapath-invalidation %q: use purge", bad)) ||
			!strings.Contains(err.Error(), "auto (") || !strings.Contains(err.Error(), "or narrow") {
			t.Errorf("%s: Validate = %v, want an error naming --datapath-invalidation and its values", bad, err)
		}
	}
}

// TestOVSVersionModifiesByUFID: the releases with upstream's fix and kovs's own build
// count as safe for narrow; 3.1.0 to 3.1.2 (Debian 12's package), 3.2.0, older series
// and what can't be read do not.
func TestOVSVersionModifiesByUFID(t *testing.T) {
	for version, want := range map[string]bool{
		"ovs-vswitchd (Open vSwitch) 3.1.0":                  false,
		"ovs-vswitchd (Open vSwitch) 3.1.2":                  false,
		"ovs-vswitchd (Open vSwitch) 3.1.0+kovsf577529219bb": true,
		"ovs-vswitchd (Open vSwitch) 3.1.3":                  true,
		"ovs-vswitchd (Open vSwitch) 3.1.10":                 true,
		"ovs-vswitchd (Open vSwitch) 3.2.0":                  false,
		"ovs-vswitchd (Open vSwitch) 3.2.1":                  true,
		"ovs-vswitchd (Open vSwitch) 3.3.0":                  true,
		"ovs-vswitchd (Open vSwitch) 4.0.0":                  true,
		"ovs-vswitchd (Open vSwitch) 3.0.7":                  false,
		"ovs-vswitchd (Open vSwitch) 2.17.9":                 false,
		"ovs-vswitchd (Open vSwitch) 3.1.0-kovs":             false, // not kovs's stamp
		"ovs-vswitchd 3.1.0":                                 false,
		"":                                                   false,
	} {
		if got := ovsVersionModifiesByUFID(version); got != want {
			t.Errorf("ovsVersionModifiesByUFID(%q) = %v, want %v", version, got, want)
		}
	}
}

// versions answers Version with answer (or err), and counts the questions.
type versions struct {
	answer string
	err    error
	asked  int
}

func (v *versions) Version(context.Context) (string, error) {
	v.asked++
	return v.answer, v.err
}

// TestAutoInvalidationFollowsTheRunningVswitchd: auto asks ovs-vswitchd's version once,
// narrows on a fixed one and purges on 3.1.0; a restart (forgetVswitchdVersion) makes it
// ask again, so an OVS upgrade or downgrade under the agent changes the choice; an
// unreadable version purges and is asked again next time. narrow and purge never ask.
func TestAutoInvalidationFollowsTheRunningVswitchd(t *testing.T) {
	ctx := context.Background()
	a := &Agent{cfg: Config{DatapathInvalidation: DatapathInvalidationAuto}}
	v := &versions{answer: "ovs-vswitchd (Open vSwitch) 3.1.0+kovs0123456789ab"}
	if !a.narrowInvalidation(ctx, v) || !a.narrowInvalidation(ctx, v) || v.asked != 1 {
		t.Fatalf("kovs's build: want narrow twice, asked once (asked %d)", v.asked)
	}
	v.answer = "ovs-vswitchd (Open vSwitch) 3.1.0"
	if !a.narrowInvalidation(ctx, v) {
		t.Fatal("before a restart the first answer holds")
	}
	a.forgetVswitchdVersion()
	if a.narrowInvalidation(ctx, v) || v.asked != 2 {
		t.Fatalf("after a restart into 3.1.0: want purge, asked twice (asked %d)", v.asked)
	}
	a.forgetVswitchdVersion()
	v.err = fmt.Errorf("ovs-appctl: cannot connect")
	if a.narrowInvalidation(ctx, v) || a.narrowInvalidation(ctx, v) || v.asked != 4 {
		t.Fatalf("unreadable: want purge and a question each time (asked %d)", v.asked)
	}
	for mode, want := range map[string]bool{DatapathInvalidationNarrow: true, DatapathInvalidationPurge: false} {
		a := &Agent{cfg: Config{DatapathInvalidation: mode}}
		if got := a.narrowInvalidation(ctx, nil); got != want {
			t.Errorf("%s: narrow = %v, want %v", mode, got, want)
		}
	}
}

// TestFullSyncKeepsLearnedFlows: the switch's learned SCTP replies are not the agent's
// flows; a full resync, which deletes every owned flow it does not want, leaves them.
func TestFullSyncKeepsLearnedFlows(t *testing.T) {
	sw := newFakeSwitch()
	learned := sw.add(t, "cookie=0x1800000000000, table=32, idle_timeout=120, priority=100,sctp,nw_src=10.244.3.10,"+
		"nw_dst=10.244.1.10,tp_src=9999,tp_dst=40000 actions=set_field:0x200/0x300->reg0")
	s := NewFlowSyncer(sw, desiredFlows(testFlows(1, 2), 1), time.Hour)
	s.sync(context.Background(), true)
	if sw.flows[learned.FlowKey] != learned {
		t.Errorf("full sync removed a learned flow")
	}
	if len(sw.flows) != 3 {
		t.Errorf("switch has %d flows, want 2 of the agent's and the learned one", len(sw.flows))
	}
}

// Datapath flows as the userspace datapath dumps them (dpctl/dump-flows -m, keys only).
const (
	firstPassFlow   = "skb_priority(0/0),skb_mark(0/0),ct_state(0/0),ct_zone(0/0),ct_mark(0/0),ct_label(0/0),recirc_id(0),dp_hash(0/0),in_port(pd),packet_type(ns=0,id=0),eth(src=0a:58:0a:f4:01:0d,dst=0a:58:0a:f4:01:01/00:00:00:00:00:00),eth_type(0x0800),ipv4(src=10.244.1.13,dst=10.244.1.12/0.0.0.0,proto=17/0,tos=0/0,ttl=64/0,frag=no),udp(src=20001/0,dst=80/0)"
	newConnFlow     = "skb_priority(0/0),skb_mark(0/0),ct_state(0x21/0x3f),ct_zone(0xfff0/0),ct_mark(0/0x1),ct_label(0/0),ct_tuple4(src=10.244.1.13/0.0.0.0,dst=10.244.1.12/0.0.0.0,proto=17/0,tp_src=20001/0,tp_dst=80/0),recirc_id(0x1),dp_hash(0/0),in_port(pd),packet_type(ns=0,id=0),eth(src=0a:58:0a:f4:01:0d,dst=0a:58:0a:f4:01:01),eth_type(0x0800),ipv4(src=10.244.1.13/0.0.0.0,dst=10.244.1.12,proto=17,tos=0/0,ttl=64,frag=no),udp(src=20001/0,dst=80/0)"
	establishedFlow = "skb_priority(0/0),skb_mark(0/0),ct_state(0x22/0x3b),ct_zone(0xfff0/0),ct_mark(0/0x1),ct_label(0/0),ct_tuple4(src=10.244.1.13/0.0.0.0,dst=10.244.1.12/0.0.0.0,proto=17/0,tp_src=20001/0,tp_dst=80/0),recirc_id(0x1),dp_hash(0/0),in_port(pd),packet_type(ns=0,id=0),eth(src=0a:58:0a:f4:01:0d,dst=0a:58:0a:f4:01:01),eth_type(0x0800),ipv4(src=10.244.1.13/0.0.0.0,dst=10.244.1.12,proto=17,tos=0/0,ttl=64,frag=no),udp(src=20001/0,dst=80/0)"
)

func TestPolicyBlindKeepsFirstPassesAndEstablishedConnections(t *testing.T) {
	for _, tc := range []struct {
		name, key string
		want      bool
	}{
		{"a first pass (before ct)", firstPassFlow, true},
		{"a new connection after ct", newConnFlow, false},
		{"an established connection after ct", establishedFlow, true},
		{"a related packet after ct", strings.Replace(establishedFlow, "ct_state(0x22/0x3b)", "ct_state(0x24/0x3f)", 1), true},
		{"established, but the est bit is not in the mask", strings.Replace(establishedFlow, "ct_state(0x22/0x3b)", "ct_state(0x22/0x39)", 1), false},
		{"established, not tracked", strings.Replace(establishedFlow, "ct_state(0x22/0x3b)", "ct_state(0x2/0x3b)", 1), false},
		{"established SCTP (policy checks every SCTP packet)", strings.Replace(establishedFlow, "proto=17,tos", "proto=132,tos", 1), false},
		{"established, protocol wildcarded", strings.Replace(establishedFlow, "proto=17,tos", "proto=17/0,tos", 1), false},
		{"established IPv6", strings.Replace(establishedFlow, "ipv4(src=10.244.1.13/0.0.0.0,dst=10.244.1.12,proto=17,", "ipv6(src=fd00::d/::,dst=fd00::c,label=0/0,proto=6,", 1), true},
		{"no ct_state", "recirc_id(0x3),in_port(pd),eth_type(0x0800),ipv4(proto=6,frag=no)", false},
	} {
		if got := policyBlind(ovs.DatapathFlow{UFID: "ufid:1", Key: tc.key}); got != tc.want {
			t.Errorf("%s: policyBlind = %v, want %v\n%s", tc.name, got, tc.want, tc.key)
		}
	}
}

// A policy change deletes the datapath flows it may affect in one batch; when a deletion
// fails, or there are too many, it purges them all, and only a failed purge fails it.
func TestInvalidateDatapathFlowsFallsBackToThePurge(t *testing.T) {
	flows := func(n int) []ovs.DatapathFlow {
		dp := []ovs.DatapathFlow{{UFID: "ufid:est", Key: establishedFlow}}
		for i := range n {
			dp = append(dp, ovs.DatapathFlow{UFID: fmt.Sprintf("ufid:%d", i), Key: newConnFlow})
		}
		return dp
	}
	r := &recordingCaches{dp: flows(2)}
	if err := invalidateDatapathFlows(context.Background(), r); err != nil {
		t.Fatal(err)
	}
	if want := []string{"dump-flows", "del-flows ufid:0 ufid:1"}; !slices.Equal(r.calls, want) {
		t.Errorf("two stale flows: %q, want %q", r.calls, want)
	}
	r = &recordingCaches{dp: flows(2), delErr: fmt.Errorf("ovs-appctl: exit status 2")}
	if err := invalidateDatapathFlows(context.Background(), r); err != nil {
		t.Fatal(err)
	}
	if want := []string{"dump-flows", "del-flows ufid:0 ufid:1", "purge"}; !slices.Equal(r.calls, want) {
		t.Errorf("a failed deletion: %q, want %q", r.calls, want)
	}
	r = &recordingCaches{dp: flows(maxDatapathDeletes + 1)}
	if err := invalidateDatapathFlows(context.Background(), r); err != nil {
		t.Fatal(err)
	}
	if want := []string{"dump-flows", "purge"}; !slices.Equal(r.calls, want) {
		t.Errorf("%d stale flows: %q, want %q", maxDatapathDeletes+1, r.calls, want)
	}
}
