package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kovs-net/kovs/go-controller/pkg/ovs/ovsfake"
	"github.com/kovs-net/kovs/go-controller/pkg/pipeline"
	"github.com/kovs-net/kovs/go-controller/pkg/policy"
)

// testNodeConfig is an IPv4 node with the fixed tunnel and gateway ports.
func testNodeConfig() pipeline.NodeConfig {
	return pipeline.NodeConfig{
		Name: "node-1", GatewayMAC: net.HardwareAddr{0x0a, 0x58, 0x0a, 0xf4, 0x01, 0x01},
		GatewayIPs: []netip.Addr{netip.MustParseAddr("10.244.1.1")}, PodSubnets: []netip.Prefix{netip.MustParsePrefix("10.244.1.0/24")},
		ClusterCIDRs: []netip.Prefix{netip.MustParsePrefix("10.244.0.0/16")}, TunnelOFPort: tunnelOFPort, GatewayOFPort: gatewayOFPort,
		UnderlayIPs: []netip.Addr{netip.MustParseAddr("172.31.0.1")},
	}
}

// testPod is pod x/<name> at 10.244.1.<host> on ofport.
func testPod(name string, ofport uint32, host int) pipeline.PodPort {
	return pipeline.PodPort{Namespace: "x", Name: name, UID: "uid-" + name, OFPort: ofport,
		MAC: net.HardwareAddr{0x0a, 0x58, 0x0a, 0xf4, 0x01, byte(host)}, IPs: []netip.Addr{netip.AddrFrom4([4]byte{10, 244, 1, byte(host)})}}
}

func podKey(name string) policy.PodKey {
	return policy.PodKey{Namespace: "x", Name: name, UID: "uid-" + name}
}

func podRef(name string, host int) policy.AppliedPod {
	return policy.AppliedPod{PodKey: podKey(name), IPs: []netip.Addr{netip.AddrFrom4([4]byte{10, 244, 1, byte(host)})}}
}

func hostPrefixes(ss ...string) []netip.Prefix {
	var out []netip.Prefix
	for _, s := range ss {
		out = append(out, policy.HostPrefix(netip.MustParseAddr(s)))
	}
	return policy.SortPrefixes(out)
}

func ingressRule(id string, peers []string, ports ...policy.Port) policy.Rule {
	return policy.Rule{ID: id, Policy: policy.PolicyRef{Namespace: "x", Name: "np"}, Direction: policy.Ingress,
		AppliedTo: "g-np", Peers: peers, Ports: ports, Action: policy.ActionAllow}
}

// policyRig is a node's state, its flow syncer on a fake switch, and its policy sink. The
// syncer does not run by itself: tests sync when they want to.
type policyRig struct {
	state  *NodeState
	sw     *ovsfake.OpenFlow
	syncer *FlowSyncer
	sink   *NodePolicy
}

func newPolicyRig(t *testing.T, pods ...pipeline.PodPort) *policyRig {
	t.Helper()
	r := &policyRig{state: NewNodeState(1, nil), sw: ovsfake.NewOpenFlow()}
	r.state.SetNode(testNodeConfig())
	r.state.EnablePolicy("node-1")
	for _, p := range pods {
		r.state.SetPod(fmt.Sprint("veth-", p.Name), p)
	}
	r.syncer = NewFlowSyncer(OpenFlowSwitch(r.sw), r.state.Desired, time.Hour)
	r.sink = NewNodePolicy("node-1", r.state, r.syncer.installedGeneration)
	return r
}

func (r *policyRig) sync(t *testing.T, full bool) {
	t.Helper()
	r.syncer.sync(context.Background(), full)
	if _, err := r.syncer.Synced(); err != nil {
		t.Fatalf("sync: %v", err)
	}
}

// flows are the switch's flows as text, sorted.
func (r *policyRig) flows() []string {
	var out []string
	for _, e := range r.sw.Flows() {
		out = append(out, e.String())
	}
	slices.Sort(out)
	return out
}

// startShare is generation 1 of node-1's share: x/a and x/b, a policy isolating x/a for
// ingress and allowing TCP 80 from 10.244.2.10.
func startShare() policy.NodeShare {
	s := policy.NewNodeShare("node-1")
	s.Generation = 1
	s.AddressSets["s-peers"] = policy.AddressSet{ID: "s-peers", Addresses: hostPrefixes("10.244.2.10")}
	s.AppliedToSets["g-np"] = policy.AppliedToSet{ID: "g-np", Pods: []policy.AppliedPod{podRef("a", 10)}}
	r := ingressRule("x/np/ingress/0", []string{"s-peers"}, policy.Port{Protocol: policy.TCP, Port: 80})
	s.Rules[r.ID] = r
	s.Isolation.Ingress = []policy.PodKey{podKey("a")}
	s.Pods = []policy.PodKey{podKey("a"), podKey("b")}
	return s
}

// deltas take startShare to endShare: x/c arrives and joins the policy, a peer address
// is added, a rule is replaced, x/b leaves.
func deltas() []policy.Delta {
	iso := policy.Isolation{Ingress: []policy.PodKey{podKey("a"), podKey("c")}}
	return []policy.Delta{
		{Node: "node-1", FromGeneration: 1, Generation: 4, AddedPods: []policy.PodKey{podKey("c")},
			UpdatedAppliedToSets: []policy.AppliedToSet{{ID: "g-np", Pods: []policy.AppliedPod{podRef("a", 10), podRef("c", 12)}}},
			UpdatedAddressSets:   []policy.AddressSetPatch{{ID: "s-peers", Added: hostPrefixes("10.244.3.10")}},
			Isolation:            &iso},
		{Node: "node-1", FromGeneration: 4, Generation: 6, RemovedPods: []policy.PodKey{podKey("b")},
			RemovedRules: []string{"x/np/ingress/0"},
			AddedRules:   []policy.Rule{ingressRule("x/np/ingress/1", nil, policy.Port{Protocol: policy.UDP, Port: 5000, EndPort: 5100})}},
	}
}

func endShare() policy.NodeShare {
	s := policy.NewNodeShare("node-1")
	s.Generation = 6
	s.AddressSets["s-peers"] = policy.AddressSet{ID: "s-peers", Addresses: hostPrefixes("10.244.2.10", "10.244.3.10")}
	s.AppliedToSets["g-np"] = policy.AppliedToSet{ID: "g-np", Pods: []policy.AppliedPod{podRef("a", 10), podRef("c", 12)}}
	r := ingressRule("x/np/ingress/1", nil, policy.Port{Protocol: policy.UDP, Port: 5000, EndPort: 5100})
	s.Rules[r.ID] = r
	s.Isolation.Ingress = []policy.PodKey{podKey("a"), podKey("c")}
	s.Pods = []policy.PodKey{podKey("a"), podKey("c")}
	return s
}

func localPods() []pipeline.PodPort {
	return []pipeline.PodPort{testPod("a", 3, 10), testPod("b", 4, 11), testPod("c", 5, 12)}
}

// TestSnapshotThenDeltasEqualsSnapshotOfEndState: the switch holds the same flows after a
// snapshot and deltas, each synced incrementally, as after a snapshot of the end state;
// and a policy delta changes policy flows only.
func TestSnapshotThenDeltasEqualsSnapshotOfEndState(t *testing.T) {
	incremental := newPolicyRig(t, localPods()...)
	if err := incremental.sink.Snapshot(startShare()); err != nil {
		t.Fatal(err)
	}
	incremental.sync(t, true)
	for i, d := range deltas() {
		if err := incremental.sink.Delta(d); err != nil {
			t.Fatalf("delta %d: %v", i, err)
		}
		flows, _, err := incremental.state.Desired()
		if err != nil {
			t.Fatal(err)
		}
		plan, err := incremental.syncer.plan(context.Background(), flows, false)
		if err != nil {
			t.Fatal(err)
		}
		var deletes, adds []string
		for _, k := range plan.DeleteFlows {
			deletes = append(deletes, k.String())
		}
		for _, f := range plan.AddFlows {
			adds = append(adds, f.String())
		}
		for _, text := range slices.Concat(deletes, adds) { // "table=70,priority=..." or "cookie=..., table=70, ..."
			if !strings.Contains(text, "table=50") && !strings.Contains(text, "table=70") {
				t.Errorf("delta %d changes a flow outside the policy tables: %s", i, text)
			}
		}
		if len(deletes)+len(adds) == 0 || len(deletes)+len(adds) >= len(flows.Flows)/2 {
			t.Errorf("delta %d: %d deletes and %d adds out of %d flows", i, len(deletes), len(adds), len(flows.Flows))
		}
		incremental.sync(t, false)
	}
	fresh := newPolicyRig(t, localPods()...)
	if err := fresh.sink.Snapshot(endShare()); err != nil {
		t.Fatal(err)
	}
	fresh.sync(t, true)
	if got, want := incremental.flows(), fresh.flows(); !slices.Equal(got, want) {
		t.Errorf("snapshot + deltas left other flows than a snapshot of the end state:\n got %s\nwant %s",
			strings.Join(got, "\n     "), strings.Join(want, "\n     "))
	}
	got, _ := json.Marshal(incremental.sink.share)
	want, _ := json.Marshal(endShare())
	if string(got) != string(want) {
		t.Errorf("share after deltas:\n got %s\nwant %s", got, want)
	}
}

// TestMissedDeltaIsAnError: a delta that does not follow the share, or comes before any
// snapshot, is refused with ErrGeneration and changes nothing.
func TestMissedDeltaIsAnError(t *testing.T) {
	r := newPolicyRig(t, localPods()...)
	if err := r.sink.Delta(deltas()[0]); !errors.Is(err, policy.ErrGeneration) {
		t.Errorf("delta before a snapshot: error %v, want ErrGeneration", err)
	}
	if err := r.sink.Snapshot(startShare()); err != nil {
		t.Fatal(err)
	}
	r.sync(t, true)
	before, gen := r.flows(), r.state.generationNow()
	if err := r.sink.Delta(deltas()[1]); !errors.Is(err, policy.ErrGeneration) {
		t.Errorf("delta 4->6 on a share at 1: error %v, want ErrGeneration", err)
	}
	r.sync(t, false)
	if !slices.Equal(r.flows(), before) || r.state.generationNow() != gen {
		t.Error("a refused delta changed the node's state")
	}
	other := startShare()
	other.Node = "node-2"
	if err := r.sink.Snapshot(other); err == nil {
		t.Error("another node's snapshot was accepted")
	}
}

// TestRealizedFollowsInstalledFlows: Realized reports a share generation only once its
// flows are on the switch, and follows a new snapshot even to a lower generation.
func TestRealizedFollowsInstalledFlows(t *testing.T) {
	r := newPolicyRig(t, localPods()...)
	r.sync(t, true)
	if got := r.sink.Realized(); got != 0 {
		t.Errorf("realized before any share = %d", got)
	}
	if err := r.sink.Snapshot(startShare()); err != nil {
		t.Fatal(err)
	}
	if got := r.sink.Realized(); got != 0 {
		t.Errorf("realized before the snapshot's flows are installed = %d, want 0", got)
	}
	r.syncer.OnSynced(r.sink.flowsInstalled)
	r.sync(t, false)
	select {
	case <-r.sink.RealizedChanged():
	default:
		t.Error("no RealizedChanged signal after the snapshot's flows were installed")
	}
	if got := r.sink.Realized(); got != 1 {
		t.Errorf("realized after sync = %d, want 1", got)
	}
	if err := r.sink.Delta(deltas()[0]); err != nil {
		t.Fatal(err)
	}
	if got := r.sink.Realized(); got != 1 {
		t.Errorf("realized with delta 1->4 not installed = %d, want 1", got)
	}
	r.sync(t, false)
	if got := r.sink.Realized(); got != 4 {
		t.Errorf("realized after sync = %d, want 4", got)
	}
	restarted := startShare() // a restarted controller counts from 1 again
	if err := r.sink.Snapshot(restarted); err != nil {
		t.Fatal(err)
	}
	r.sync(t, false)
	if got := r.sink.Realized(); got != 1 {
		t.Errorf("realized after a new snapshot at 1 = %d, want 1", got)
	}
}

// TestNoPolicyFeedNoPolicyFlows: without NetworkPolicy the node has no policy flows and
// no isolation.
func TestNoPolicyFeedNoPolicyFlows(t *testing.T) {
	state := NewNodeState(1, nil)
	state.SetNode(testNodeConfig())
	state.SetPod("veth-a", testPod("a", 3, 10))
	flows, _, err := state.Flows()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range flows {
		if f.Cookie.Category() == pipeline.CategoryPolicy {
			t.Errorf("policy flow without NetworkPolicy: %s", f)
		}
	}
	if state.PolicyEnabled() {
		t.Error("policy enabled without EnablePolicy")
	}
}

// fakeFeed fails its first run and then delivers a snapshot and blocks, like a stream
// client that reconnected.
type fakeFeed struct{ runs chan policy.Sink }

func (f *fakeFeed) Run(ctx context.Context, sink policy.Sink) error {
	f.runs <- sink
	if len(f.runs) == 1 {
		return errors.New("connection refused")
	}
	if err := sink.Snapshot(startShare()); err != nil {
		return err
	}
	<-ctx.Done()
	return ctx.Err()
}

// TestPolicyFeedIsRestarted: a feed that stops is run again, with the same sink.
func TestPolicyFeedIsRestarted(t *testing.T) {
	r := newPolicyRig(t, localPods()...)
	feed := &fakeFeed{runs: make(chan policy.Sink, 2)}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { runPolicyFeed(ctx, feed, r.sink, "node-1"); close(done) }()
	waitUntil(t, "the feed ran twice and delivered a snapshot", func() bool {
		listed, _, _ := r.state.PolicyHasPod(podKey("a"))
		return len(feed.runs) == 2 && listed
	})
	cancel()
	<-done
	if first, second := <-feed.runs, <-feed.runs; first != policy.Sink(r.sink) || second != first {
		t.Error("the feed was not given the node's sink")
	}
}

// TestMeetPreviousUntilRelease: a snapshot with MeetPrevious (a controller that just
// started leading) is enforced as its meet with what the node enforced before, and so are
// the deltas after it, until a delta with Release; a snapshot without it ends the meet too.
func TestMeetPreviousUntilRelease(t *testing.T) {
	r := newPolicyRig(t, localPods()...)
	old := startShare() // x/a isolated, TCP 80 from 10.244.2.10
	if err := r.sink.Snapshot(old); err != nil {
		t.Fatal(err)
	}
	// The new leader's share lets x/a receive anything: no isolation.
	open := policy.NewNodeShare("node-1")
	open.Generation, open.Pods, open.MeetPrevious = 100, old.Pods, true
	if err := r.sink.Snapshot(open); err != nil {
		t.Fatal(err)
	}
	from := netip.MustParseAddr("10.244.9.9")
	enforced := func() policy.NodeShare {
		r.sink.mu.Lock()
		defer r.sink.mu.Unlock()
		return r.sink.enforced
	}
	if got := enforced(); got.AllowsIngress(podKey("a"), from, policy.TCP, 80) || got.Generation != 100 {
		t.Fatalf("after a MeetPrevious snapshot the node enforces generation %d, allowing %s: want the meet with the old share at 100, denying it",
			got.Generation, from)
	}
	if got := enforced(); !got.AllowsIngress(podKey("a"), netip.MustParseAddr("10.244.2.10"), policy.TCP, 80) {
		t.Fatal("the meet denies what both shares allow")
	}
	if err := r.sink.Delta(policy.Delta{Node: "node-1", FromGeneration: 100, Generation: 101}); err != nil {
		t.Fatal(err)
	}
	if got := enforced(); got.AllowsIngress(podKey("a"), from, policy.TCP, 80) {
		t.Fatal("a delta without Release ended the meet")
	}
	if err := r.sink.Delta(policy.Delta{Node: "node-1", FromGeneration: 101, Generation: 102, Release: true}); err != nil {
		t.Fatal(err)
	}
	if got := enforced(); !got.AllowsIngress(podKey("a"), from, policy.TCP, 80) || got.Generation != 102 || got.MeetPrevious {
		t.Fatalf("after Release the node enforces %+v: want the share alone at 102", got)
	}
	// Again, ended by a plain snapshot this time.
	if err := r.sink.Snapshot(old); err != nil {
		t.Fatal(err)
	}
	if err := r.sink.Snapshot(open); err != nil {
		t.Fatal(err)
	}
	plain := open
	plain.MeetPrevious, plain.Generation = false, 200
	if err := r.sink.Snapshot(plain); err != nil {
		t.Fatal(err)
	}
	if got := enforced(); !got.AllowsIngress(podKey("a"), from, policy.TCP, 80) {
		t.Fatal("a snapshot without MeetPrevious did not end the meet")
	}
}
