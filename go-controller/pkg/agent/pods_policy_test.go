package agent

import (
	"context"
	"errors"
	"net/netip"
	"strings"
	"testing"
	"time"

	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/kovs-net/kovs/go-controller/pkg/agent/podaddr"
	"github.com/kovs-net/kovs/go-controller/pkg/cni"
	"github.com/kovs-net/kovs/go-controller/pkg/controller/ipam"
	"github.com/kovs-net/kovs/go-controller/pkg/ovs"
	"github.com/kovs-net/kovs/go-controller/pkg/ovs/ovsfake"
	"github.com/kovs-net/kovs/go-controller/pkg/pipeline"
)

// attachRig is a policy rig whose syncer runs, with the CNI handler over a fake OVSDB.
type attachRig struct {
	*policyRig
	ports *PodPorts
}

func newAttachRig(t *testing.T, policyWait time.Duration) *attachRig {
	t.Helper()
	r := newPolicyRig(t, testPod("a", 3, 10), testPod("b", 4, 11))
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	r.state.onChange = r.syncer.Trigger
	go r.syncer.Run(ctx)
	store := ovsfake.NewOVSDB()
	if err := store.EnsureBridge(ctx, ovs.BridgeSpec{Name: "br-int", DatapathType: ovs.DatapathNetdev}); err != nil {
		t.Fatal(err)
	}
	for i, name := range []string{"tunnel", "gateway", "veth-a", "veth-b"} { // ofports 1-4, as the rig's
		if _, err := store.EnsurePort(ctx, "br-int", ovs.PortSpec{Name: name, OfportRequest: i + 1}); err != nil {
			t.Fatal(err)
		}
	}
	ports := &PodPorts{bridge: "br-int", store: store, state: r.state, syncer: r.syncer, policyWait: policyWait,
		readiness: func() error { return nil }, book: testBook(t, store, r.state),
		pods: corelisters.NewPodLister(cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{}))}
	if err := r.sink.Snapshot(startShare()); err != nil { // lists x/a and x/b, not x/c
		t.Fatal(err)
	}
	return &attachRig{policyRig: r, ports: ports}
}

// addC is the CNI ADD of pod x/c; the rig's book hands it 10.244.1.12 (a and b hold .10
// and .11).
func addC() cni.AddRequest {
	return cni.AddRequest{ContainerID: "sandbox-c", Netns: "/var/run/netns/c", IfName: "eth0",
		Pod: cni.PodRef{Namespace: "x", Name: "c", UID: "uid-c"}, HostIfName: "veth-c"}
}

// testBook is the address book of the rig's node (block 10.244.1.0/24) holding what the
// state's pods hold, its high water kept in store's br-int.
func testBook(t *testing.T, store ovs.BridgeStore, state *NodeState) *podaddr.Book {
	t.Helper()
	book, err := podaddr.New("node-1", []netip.Prefix{netip.MustParsePrefix("10.244.1.0/24")}, ipam.PoolOptions{},
		bridgeHighWater{store: store, bridge: "br-int"}, blockSizeFlags)
	if err != nil {
		t.Fatal(err)
	}
	var records []podaddr.Record
	for name, pp := range state.Pods() {
		records = append(records, podaddr.Record{Port: name, UID: pp.UID, IPs: pp.IPs})
	}
	if err := book.Restore(records, nil); err != nil {
		t.Fatal(err)
	}
	return book
}

// hasPolicyFlow reports whether the switch has a policy flow of kind for ofport.
func (r *attachRig) hasPolicyFlow(kind pipeline.PolicyKind, ofport uint32) bool {
	for _, e := range r.sw.Flows() {
		c := pipeline.Cookie(e.Cookie)
		if c.PolicyKind() == kind && c.Object() == ofport {
			return true
		}
	}
	return false
}

// TestAddWaitsForThePodsPolicy: CNI ADD of a pod the share does not list yet returns
// only once a delta lists it and its flows are installed; meanwhile the pod's port is
// closed by the pending deny, which then gives way to its policy.
func TestAddWaitsForThePodsPolicy(t *testing.T) {
	r := newAttachRig(t, 10*time.Second)
	done := make(chan error, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	go func() { done <- addErr(r.ports.Add(ctx, addC())) }()
	var ofport uint32
	waitUntil(t, "the new pod's pending deny is installed", func() bool {
		ofport = r.state.Pods()["veth-c"].OFPort
		return ofport != 0 && r.hasPolicyFlow(pipeline.PolicyKindPending, ofport)
	})
	select {
	case err := <-done:
		t.Fatalf("Add returned (%v) before the pod's policy arrived", err)
	case <-time.After(200 * time.Millisecond):
	}
	if err := r.sink.Delta(deltas()[0]); err != nil { // lists x/c, isolates it for ingress
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Add: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Add did not return after the pod's policy arrived")
	}
	if r.hasPolicyFlow(pipeline.PolicyKindPending, ofport) || !r.hasPolicyFlow(pipeline.PolicyKindIngressDeny, ofport) {
		t.Error("when Add returned, the pod's flows were not its policy's")
	}
}

// TestAddWithoutPolicyInTimeStartsThePodClosed: when the pod's policy does not arrive
// within the wait (kovs-controller down), CNI ADD succeeds with the pod pending, closed by
// the pending deny, which gives way to its policy once that arrives. An ADD whose own
// deadline runs out first fails with "try again later" naming kovs-controller.
func TestAddWithoutPolicyInTimeStartsThePodClosed(t *testing.T) {
	r := newAttachRig(t, 300*time.Millisecond)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := r.ports.Add(ctx, addC()); err != nil {
		t.Fatalf("Add without the pod's policy in time = %v, want the pod started closed", err)
	}
	ofport := r.state.Pods()["veth-c"].OFPort
	if !r.hasPolicyFlow(pipeline.PolicyKindPending, ofport) {
		t.Fatal("the pod whose policy has not come is not closed")
	}
	if err := r.sink.Delta(deltas()[0]); err != nil { // lists x/c, isolates it for ingress
		t.Fatal(err)
	}
	waitUntil(t, "the pod's policy replaces its pending deny", func() bool {
		return !r.hasPolicyFlow(pipeline.PolicyKindPending, ofport) && r.hasPolicyFlow(pipeline.PolicyKindIngressDeny, ofport)
	})

	r2 := newAttachRig(t, time.Hour)
	short, cancel2 := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel2()
	_, err := r2.ports.Add(short, addC())
	var cniErr *cni.Error
	if !errors.As(err, &cniErr) || cniErr.Code != cni.CodeTryAgainLater ||
		!strings.Contains(cniErr.Msg, "NetworkPolicy for pod x/c") || !strings.Contains(cniErr.Msg, "kovs-controller") {
		t.Fatalf("Add past its own deadline = %#v, want code %d about the pod's NetworkPolicy and kovs-controller", err, cni.CodeTryAgainLater)
	}
}

// TestAddWithoutPolicyDoesNotWait: with NetworkPolicy disabled, Attach returns once the
// pod's flows are in.
func TestAddWithoutPolicyDoesNotWait(t *testing.T) {
	r := newAttachRig(t, time.Hour)
	r.state.mu.Lock()
	r.state.policy = nil // as if no PolicyFeed were configured
	r.state.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := addErr(r.ports.Add(ctx, addC())); err != nil {
		t.Fatal(err)
	}
}

// addErr keeps Add's error.
func addErr(_ *cni.PodNetworkConfig, err error) error { return err }

func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting until %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
