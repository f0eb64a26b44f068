package ovsbench

import (
	"cmp"
	"context"
	"fmt"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/kovs-net/kovs/go-controller/pkg/agent"
	"github.com/kovs-net/kovs/go-controller/pkg/ovs"
	"github.com/kovs-net/kovs/go-controller/pkg/ovs/ovstest"
	"github.com/kovs-net/kovs/go-controller/pkg/pipeline"
	"github.com/kovs-net/kovs/go-controller/pkg/policy"
)

// deltaSet is the peer address set every measured delta adds one address to: 10 policies
// reference it, so the new address is one clause flow carrying their 10 conjunctions.
const deltaSet = "s-000"

// syncTimeout bounds one flow sync.
const syncTimeout = 2 * time.Minute

// BenchmarkAgentPolicyInstall is the agent benchmark of issue 4: 1,000 NetworkPolicies over
// 1,000 local pods on one node (see benchShare for the mix), with 3 tunnel peers.
//
//   - compile: the node's desired flows compiled from scratch (NodeState.Flows: every
//     stage of the pipeline, as the agent's first sync compiles them). ns/op is the
//     compile time; flows is the count, checked against the formula (logged, with the
//     cross product it avoids).
//   - install: those flows added to an empty br-int of a real ovs-vswitchd in one bundle
//     through pkg/ovs (ovs-ofctl bundle). ns/op is the install time.
//   - delta: the agent's own path for one change: NodePolicy.Delta (one peer address added)
//     -> NodeState -> FlowSyncer (compile, diff against what it installed, one bundle) ->
//     (compiling only the objects the delta changed), the agent's datapath invalidation (SCTP conntrack flush, datapath flow purge) ->
//     NodePolicy.Realized reports the delta's generation. ns/op is that latency;
//     bundle-flows/op the bundle's size; ms-compile/op, ms-diff/op (the syncer's diff
//     and bookkeeping: the rest), ms-bundle/op and ms-invalidate/op where the time goes.
//     Deltas are 50 ms apart, past the syncer's 20 ms bounded-frequency pause, which they
//     never wait for.
//     ms-full-sync is the agent's first, full sync of the whole node into an empty br-int
//     (dump, compile, diff, one bundle), measured once.
//
// install and delta need root and OVS (they skip otherwise); each starts its own rig.
func BenchmarkAgentPolicyInstall(b *testing.B) {
	level := logrus.GetLevel()
	logrus.SetLevel(logrus.WarnLevel) // the syncer logs every sync at info
	b.Cleanup(func() { logrus.SetLevel(level) })
	n := newBenchNode(b)
	b.Run("compile", n.benchCompile)
	b.Run("install", n.benchInstall)
	b.Run("delta", n.benchDelta)
}

// benchNode is the benchmarked node: its desired state as the agent holds it.
type benchNode struct {
	share policy.NodeShare
	pods  []pipeline.PodPort
	peers []pipeline.TunnelPeer
	state *agent.NodeState
}

func newBenchNode(b *testing.B) *benchNode {
	n := &benchNode{share: benchShare(), pods: localPodPorts(), peers: tunnelPeers()}
	if err := n.share.Validate(); err != nil {
		b.Fatalf("benchmark share: %v", err)
	}
	n.state = newNodeState(n.pods, n.peers, nil)
	n.state.SetPolicy(n.share)
	return n
}

// newNodeState is node-1's desired state with its pods and peers, NetworkPolicy enabled
// (an empty share until one is set).
func newNodeState(pods []pipeline.PodPort, peers []pipeline.TunnelPeer, onChange func()) *agent.NodeState {
	state := agent.NewNodeState(1, onChange)
	state.SetNode(nodeConfig())
	for _, p := range pods {
		state.SetPod(fmt.Sprintf("veth%04d", p.OFPort), p)
	}
	state.SetPeers(peers)
	state.EnablePolicy(nodeName)
	return state
}

func (n *benchNode) flows(b *testing.B) []pipeline.Flow {
	flows, _, err := n.state.Flows()
	if err != nil {
		b.Fatalf("compile flows: %v", err)
	}
	return flows
}

func (n *benchNode) benchCompile(b *testing.B) {
	builder, err := pipeline.NewBuilder(nodeConfig(), 1)
	if err != nil {
		b.Fatal(err)
	}
	want, err := predictFlows(builder, n.share, n.pods, n.peers)
	if err != nil {
		b.Fatal(err)
	}
	var flows []pipeline.Flow
	for b.Loop() {
		flows = n.flows(b)
	}
	policyFlows := len(builder.PolicyFlows(n.share, n.pods))
	b.ReportMetric(float64(len(flows)), "flows")
	b.ReportMetric(float64(policyFlows), "policy-flows")
	b.Logf("%d policies, %d rules, %d address sets, %d applied-to sets over %d local pods: %d flows (%d for policy)",
		policies, len(n.share.Rules), len(n.share.AddressSets), len(n.share.AppliedToSets), len(n.pods), len(flows), policyFlows)
	b.Logf("formula: %s; policy %d, total %d (one flow per pod x peer x port of each rule would be %d)",
		want.terms, want.policy, want.node+want.policy, want.product)
	if len(flows) != want.node+want.policy || policyFlows != want.policy {
		b.Errorf("compiled %d flows (%d for policy), the formula says %d (%d)", len(flows), policyFlows, want.node+want.policy, want.policy)
	}
}

func (n *benchNode) benchInstall(b *testing.B) {
	rig, of := startBrInt(b)
	ctx := context.Background()
	flows := n.flows(b)
	mods := make([]ovs.Mod, len(flows))
	for i, f := range flows {
		mods[i] = f.Rendered().Add()
	}
	for b.Loop() {
		b.StopTimer()
		rig.Ofctl(b, "del-flows", "br-int")
		b.StartTimer()
		if err := of.Bundle(ctx, mods); err != nil {
			b.Fatalf("install %d flows: %v", len(mods), err)
		}
	}
	b.StopTimer()
	installed, err := of.DumpFlows(ctx, 0, 0)
	if err != nil {
		b.Fatal(err)
	}
	if len(installed) != len(flows) {
		b.Errorf("br-int holds %d flows after the bundle of %d", len(installed), len(flows))
	}
	b.ReportMetric(float64(len(flows)), "flows")
}

func (n *benchNode) benchDelta(b *testing.B) {
	_, of := startBrInt(b)
	a := startAgent(b, &recordingSwitch{of: of}, n.pods, n.peers, n.share)
	sw := a.sw.stats()
	compile, _ := a.compile.times()
	b.Logf("first full sync into an empty br-int: %s (compile %s, one bundle of %d flows %s)",
		a.fullSync.Round(time.Millisecond), compile.Round(time.Millisecond), sw.lastAdds, sw.last.Round(time.Millisecond))
	generation := n.share.Generation
	var rec deltaTotals
	for b.Loop() {
		b.StopTimer()
		time.Sleep(50 * time.Millisecond) // past the syncer's 20 ms bounded-frequency pause
		a.reset()
		d := policy.Delta{Node: nodeName, FromGeneration: generation, Generation: generation + 1,
			UpdatedAddressSets: []policy.AddressSetPatch{{ID: deltaSet, Added: []netip.Prefix{newPeerAddress(b, rec.deltas)}}}}
		b.StartTimer()
		start := time.Now()
		if err := a.sink.Delta(d); err != nil {
			b.Fatalf("delta %d->%d: %v", d.FromGeneration, d.Generation, err)
		}
		a.waitRealized(b, d.Generation)
		took := time.Since(start)
		b.StopTimer()
		generation = d.Generation
		rec.add(b, a, took)
		b.StartTimer()
	}
	rec.report(b)
	b.ReportMetric(ms(a.fullSync), "ms-full-sync")
}

// deltaTotals sums what the measured deltas cost.
type deltaTotals struct {
	deltas, syncs, flows               int
	total, compile, bundle, invalidate time.Duration
}

func (t *deltaTotals) add(b *testing.B, a *agentRig, took time.Duration) {
	sw := a.sw.stats()
	_, compile := a.compile.times()
	invalidate, err := a.inval.took()
	if err != nil {
		b.Fatalf("invalidate the datapath after a policy bundle: %v", err)
	}
	t.invalidate += invalidate
	t.deltas++
	t.total += took
	t.syncs += sw.applies
	t.flows += sw.deletes + sw.adds
	t.compile += compile
	t.bundle += sw.took
}

func (t deltaTotals) report(b *testing.B) {
	per := func(v float64) float64 { return v / float64(t.deltas) }
	b.ReportMetric(per(float64(t.flows)), "bundle-flows/op")
	b.ReportMetric(per(ms(t.compile)), "ms-compile/op")
	b.ReportMetric(per(ms(t.bundle)), "ms-bundle/op")
	b.ReportMetric(per(ms(t.invalidate)), "ms-invalidate/op")
	diff := t.total - t.compile - t.bundle - t.invalidate
	b.ReportMetric(per(ms(diff)), "ms-diff/op")
	b.Logf("%d deltas of one peer address: %d bundles of %d flows in all (1 clause flow each predicted); per delta %.1f ms: compile %.1f, diff and bookkeeping %.1f, bundle %.1f, datapath invalidation %.1f",
		t.deltas, t.syncs, t.flows, per(ms(t.total)), per(ms(t.compile)), per(ms(diff)), per(ms(t.bundle)), per(ms(t.invalidate)))
}

// newPeerAddress is the i-th address the deltas add: a pod of no known node, inside the
// cluster CIDR (10.244.20.0 and up), never in a set yet.
func newPeerAddress(b *testing.B, i int) netip.Prefix {
	if i >= 200*250 {
		b.Fatalf("more than %d deltas: out of fresh peer addresses", i)
	}
	return policy.HostPrefix(netip.AddrFrom4([4]byte{10, 244, byte(20 + i/250), byte(2 + i%250)}))
}

// startBrInt starts a rig with br-int as kovs-agent creates it (userspace datapath,
// fail_mode secure, OpenFlow 1.3 to 1.5, in-band control off) and returns an OpenFlow
// client of it.
func startBrInt(b *testing.B) (*ovstest.Rig, *ovs.OpenFlow) {
	rig := ovstest.Start(b)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	db, err := ovs.NewOVSDB(ctx, rig.Endpoint())
	if err != nil {
		b.Fatalf("connect to the rig's OVSDB: %v", err)
	}
	defer db.Close()
	if err := db.EnsureBridge(ctx, ovs.BridgeSpec{
		Name: "br-int", DatapathType: ovs.DatapathNetdev, FailMode: ovs.FailModeSecure,
		Protocols:   []string{"OpenFlow13", "OpenFlow14", "OpenFlow15"},
		OtherConfig: map[string]string{"datapath-id": "00000a0000000001", "disable-in-band": "true"},
		ExternalIDs: map[string]string{"kovs.io/owner": "kovs-agent"},
	}); err != nil {
		b.Fatalf("create br-int: %v", err)
	}
	of, err := ovs.NewOpenFlow(ovs.OpenFlowConfig{Bridge: "br-int", RunDir: rig.Dir, VswitchdCtl: rig.VswitchdCtl})
	if err != nil {
		b.Fatal(err)
	}
	return rig, of
}

// agentRig is the agent's NetworkPolicy path on a real br-int: the policy sink, the
// node's state and the flow syncer, running as kovs-agent runs them.
type agentRig struct {
	state    *agent.NodeState
	syncer   *agent.FlowSyncer
	sink     *agent.NodePolicy
	sw       *recordingSwitch
	compile  *compileTimer
	inval    *invalidation
	synced   chan struct{} // a token after every successful sync
	fullSync time.Duration // the first sync: everything into an empty br-int
}

// startAgent wires the agent's policy path as kovs-agent does, delivers share as the
// first snapshot, runs the flow syncer (no periodic resync during the benchmark) and
// waits until the snapshot is realized. The syncer is created last, so no trigger is
// pending when it starts: its first, full sync is the only one until the first delta.
func startAgent(b *testing.B, sw *recordingSwitch, pods []pipeline.PodPort, peers []pipeline.TunnelPeer, share policy.NodeShare) *agentRig {
	a := &agentRig{sw: sw, synced: make(chan struct{}, 1)}
	a.state = newNodeState(pods, peers, func() {
		if a.syncer != nil {
			a.syncer.Trigger()
		}
	})
	a.sink = agent.NewNodePolicy(nodeName, a.state, func() uint64 {
		gen, _ := a.syncer.Synced()
		return gen
	})
	if err := a.sink.Snapshot(share); err != nil {
		b.Fatalf("snapshot: %v", err)
	}
	a.compile = &compileTimer{desire: a.state.Desired}
	a.inval = &invalidation{vswitchd: sw.of.Vswitchd()}
	a.syncer = agent.NewFlowSyncer(sw, a.compile.desired, time.Hour)
	if err := a.syncer.CheapResync(time.Hour, a.state.Generation); err != nil { // as kovs-agent runs it
		b.Fatal(err)
	}
	a.syncer.OnApplied(a.inval.after)
	a.syncer.OnSynced(func(uint64) {
		select {
		case a.synced <- struct{}{}:
		default:
		}
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	b.Cleanup(func() { cancel(); <-done }) // before the rig stops
	start := time.Now()
	go func() {
		defer close(done)
		a.syncer.Run(ctx)
	}()
	a.waitRealized(b, share.Generation)
	a.fullSync = time.Since(start)
	return a
}

// waitRealized waits until the sink reports generation realized: its flows are on br-int.
func (a *agentRig) waitRealized(b *testing.B, generation uint64) {
	deadline := time.After(syncTimeout)
	for a.sink.Realized() < generation {
		select {
		case <-a.synced:
		case <-deadline:
			_, err := a.syncer.Synced()
			b.Fatalf("share generation %d not realized within %s (last sync error: %v)", generation, syncTimeout, err)
		}
	}
}

// reset forgets what the previous syncs cost.
func (a *agentRig) reset() {
	a.sw.reset()
	a.compile.reset()
	a.inval.reset()
}

// invalidation is what kovs-agent does after every bundle that touches a policy table
// (Agent.invalidateAfterPolicyChange, which is not exported; every bundle here touches
// one): on the userspace datapath, flush the zone's SCTP conntrack entries, then purge
// the cached datapath flows. Timed.
type invalidation struct {
	vswitchd *ovs.Vswitchd

	mu    sync.Mutex
	total time.Duration
	err   error
}

func (i *invalidation) after(ctx context.Context, _ agent.SwitchPlan) error {
	start := time.Now()
	err := i.vswitchd.FlushConntrack(ctx, pipeline.CTZone, pipeline.IPProtoSCTP)
	if err == nil {
		err = i.vswitchd.PurgeDatapathFlows(ctx)
	}
	i.mu.Lock()
	defer i.mu.Unlock()
	i.total += time.Since(start)
	i.err = cmp.Or(i.err, err)
	return err
}

// took is the time spent since the last reset, and the first error.
func (i *invalidation) took() (time.Duration, error) {
	i.mu.Lock()
	defer i.mu.Unlock()
	return i.total, i.err
}

func (i *invalidation) reset() {
	i.mu.Lock()
	defer i.mu.Unlock()
	i.total = 0
}

// compileTimer times the syncer's calls of NodeState.Desired.
type compileTimer struct {
	desire func() (pipeline.Desired, uint64, error)

	mu          sync.Mutex
	last, total time.Duration
}

func (c *compileTimer) desired() (pipeline.Desired, uint64, error) {
	start := time.Now()
	flows, gen, err := c.desire()
	took := time.Since(start)
	c.mu.Lock()
	c.last, c.total = took, c.total+took
	c.mu.Unlock()
	return flows, gen, err
}

// times are the last compile and the sum since the last reset.
func (c *compileTimer) times() (last, total time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.last, c.total
}

func (c *compileTimer) reset() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.total = 0
}

// recordingSwitch is br-int's OpenFlow side as the agent's FlowSyncer uses it (the agent's
// own adapter, agent.OpenFlowSwitch), counting what it applies.
type recordingSwitch struct {
	of *ovs.OpenFlow

	mu sync.Mutex
	bundles
}

func (s *recordingSwitch) Apply(ctx context.Context, p agent.SwitchPlan) error {
	start := time.Now()
	err := agent.OpenFlowSwitch(s.of).Apply(ctx, p)
	took := time.Since(start)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.applies++
	s.deletes += len(p.DeleteFlows)
	s.adds += len(p.AddFlows)
	s.took += took
	s.last, s.lastAdds = took, len(p.AddFlows)
	return err
}

func (s *recordingSwitch) Flows(ctx context.Context) ([]ovs.Flow, error) {
	start := time.Now()
	flows, err := agent.OpenFlowSwitch(s.of).Flows(ctx)
	s.read(start, len(flows))
	return flows, err
}

func (s *recordingSwitch) Groups(ctx context.Context) ([]ovs.Group, error) {
	start := time.Now()
	groups, err := agent.OpenFlowSwitch(s.of).Groups(ctx)
	s.read(start, 0)
	return groups, err
}

func (s *recordingSwitch) CountFlows(ctx context.Context, filter pipeline.CookieFilter) (int, error) {
	start := time.Now()
	n, err := agent.OpenFlowSwitch(s.of).CountFlows(ctx, filter)
	s.read(start, 0)
	return n, err
}

// read notes a read of the switch that started at start and returned flows flows.
func (s *recordingSwitch) read(start time.Time, flows int) {
	took := time.Since(start)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.dumped += flows
	s.bundles.read += took
}

// bundles is what the switch applied since the last reset, and its last bundle; dumped
// and read are the flows the syncer read from it and the time its reads took.
type bundles struct {
	applies, deletes, adds int
	took, last             time.Duration
	lastAdds               int
	dumped                 int
	read                   time.Duration
}

func (s *recordingSwitch) stats() bundles {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.bundles
}

func (s *recordingSwitch) reset() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.applies, s.deletes, s.adds, s.took = 0, 0, 0, 0
	s.dumped, s.bundles.read = 0, 0
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
