package agent

import (
	"context"
	"fmt"
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

// recordingCaches records the cache invalidations and flow deletions, in order.
type recordingCaches struct{ calls []string }

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

// TestPolicyChangeDeletesLearnedSCTPRepliesAfterThePurge: only the replies (kind 0,
// object 0), not the learned translations of stateless SCTP Services.
func TestPolicyChangeDeletesLearnedSCTPRepliesAfterThePurge(t *testing.T) {
	for _, netdev := range []bool{true, false} {
		r := &recordingCaches{}
		invalidatePolicyCaches(context.Background(), r, r, netdev)
		want := []string{"purge", "del-flows cookie=0x800000000000/0xffffffffffff"}
		if netdev {
			want = append([]string{"flush-conntrack zone=65520 ct_nw_proto=132"}, want...)
		}
		if !slices.Equal(r.calls, want) {
			t.Errorf("netdev=%v: %q, want %q", netdev, r.calls, want)
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
