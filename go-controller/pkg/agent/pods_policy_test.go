package agent

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/kovs-net/kovs/go-controller/pkg/cni"
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
		readiness: func() error { return nil }, wait: time.Second,
		pods: recordedPods(t, recorded{"a", 10, "uid-a"}, recorded{"b", 11, "uid-b"}, recorded{"c", 12, "uid-c"})}
	if err := r.sink.Snapshot(startShare()); err != nil { // lists x/a and x/b, not x/c
		t.Fatal(err)
	}
	return &attachRig{policyRig: r, ports: ports}
}

func attachC() cni.AttachRequest {
	return cni.AttachRequest{ContainerID: "sandbox-c", Netns: "/var/run/netns/c", IfName: "eth0",
		Pod: cni.PodRef{Namespace: "x", Name: "c", UID: "uid-c"}, HostIfName: "veth-c", MAC: "0a:58:0a:f4:01:0c",
		IPs: []cni.IPConfig{{Address: "10.244.1.12/24", Gateway: "10.244.1.1"}}}
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

// TestAttachWaitsForThePodsPolicy: CNI ADD of a pod the share does not list yet returns
// only once a delta lists it and its flows are installed; meanwhile the pod's port is
// closed by the pending deny, which then gives way to its policy.
func TestAttachWaitsForThePodsPolicy(t *testing.T) {
	r := newAttachRig(t, 10*time.Second)
	done := make(chan error, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	go func() { done <- r.ports.Attach(ctx, attachC()) }()
	var ofport uint32
	waitUntil(t, "the new pod's pending deny is installed", func() bool {
		ofport = r.state.Pods()["veth-c"].OFPort
		return ofport != 0 && r.hasPolicyFlow(pipeline.PolicyKindPending, ofport)
	})
	select {
	case err := <-done:
		t.Fatalf("Attach returned (%v) before the pod's policy arrived", err)
	case <-time.After(200 * time.Millisecond):
	}
	if err := r.sink.Delta(deltas()[0]); err != nil { // lists x/c, isolates it for ingress
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Attach: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Attach did not return after the pod's policy arrived")
	}
	if r.hasPolicyFlow(pipeline.PolicyKindPending, ofport) || !r.hasPolicyFlow(pipeline.PolicyKindIngressDeny, ofport) {
		t.Error("when Attach returned, the pod's flows were not its policy's")
	}
}

// TestAttachTimesOutWithoutPolicy: when the pod's policy does not arrive in time, CNI ADD
// fails with "try again later" and a message that names kovs-controller.
func TestAttachTimesOutWithoutPolicy(t *testing.T) {
	r := newAttachRig(t, 300*time.Millisecond)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err := r.ports.Attach(ctx, attachC())
	var cniErr *cni.Error
	if !errors.As(err, &cniErr) || cniErr.Code != cni.CodeTryAgainLater ||
		!strings.Contains(cniErr.Msg, "NetworkPolicy for pod x/c") || !strings.Contains(cniErr.Msg, "kovs-controller") {
		t.Fatalf("Attach error = %#v, want code %d about the pod's NetworkPolicy and kovs-controller", err, cni.CodeTryAgainLater)
	}
	if ofport := r.state.Pods()["veth-c"].OFPort; !r.hasPolicyFlow(pipeline.PolicyKindPending, ofport) {
		t.Error("the pod whose policy never came is not closed")
	}
}

// TestAttachWithoutPolicyDoesNotWait: with NetworkPolicy disabled, Attach returns once the
// pod's flows are in.
func TestAttachWithoutPolicyDoesNotWait(t *testing.T) {
	r := newAttachRig(t, time.Hour)
	r.state.mu.Lock()
	r.state.policy = nil // as if no PolicyFeed were configured
	r.state.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := r.ports.Attach(ctx, attachC()); err != nil {
		t.Fatal(err)
	}
}

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
