package transition

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/kovs-net/kovs/go-controller/pkg/controller/networkpolicy"
	"github.com/kovs-net/kovs/go-controller/pkg/policy"
)

// The migration of case 61 step 3, through the real compiler and the gate's goroutines:
// x/a (node-1) gets an egress policy that denies everything, then y's ingress policy
// (node-2) is deleted. node-2's relaxation must wait until node-1 reports its
// restriction realized, and then come.
func TestGateHoldsRelaxationUntilRestrictionRealized(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	pod := func(ns, name, node, ip string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: "uid-ns-name"},
			Spec:   corev1.PodSpec{NodeName: node},
			Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIPs: []corev1.PodIP{{IP: ip}}}}
	}
	ns := func(name string) *corev1.Namespace {
		return &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"kubernetes.io/metadata.name": name}}}
	}
	isolateY := &networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: "y", Name: "y-ipblock"},
		Spec: networkingv1.NetworkPolicySpec{PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress},
			Ingress: []networkingv1.NetworkPolicyIngressRule{{From: []networkingv1.NetworkPolicyPeer{{IPBlock: &networkingv1.IPBlock{CIDR: "192.168.0.0/24"}}}}}}}
	client := fake.NewClientset(ns("x"), ns("y"), pod("x", "a", "node-1", "10.0.1.1"), pod("y", "b", "node-2", "10.0.2.1"), isolateY)
	factory := informers.NewSharedInformerFactory(client, 0)
	compiler, err := networkpolicy.New(factory, networkpolicy.Options{})
	if err != nil {
		t.Fatal(err)
	}
	gate := New(compiler, Options{Base: 1000, Timeout: time.Hour})
	factory.Start(ctx.Done())
	go func() { _ = compiler.Run(ctx) }()
	go func() { _ = gate.Run(ctx) }()

	share1, deltas1, cancel1, err := gate.Watch(ctx, "node-1")
	if err != nil {
		t.Fatal(err)
	}
	defer cancel1()
	share2, deltas2, cancel2, err := gate.Watch(ctx, "node-2")
	if err != nil {
		t.Fatal(err)
	}
	defer cancel2()
	yb := policy.PodKey{Namespace: "y", Name: "b", UID: "uid-ns-name"}
	if !share2.Isolation.Isolated(policy.Ingress, "y", "b") {
		t.Fatalf("node-2's first share does not isolate y/b: %+v", share2.Isolation)
	}
	// The gate's first shares are to be met with whatever the nodes enforced before;
	// once both nodes realized theirs, both are released.
	if !share1.MeetPrevious || !share2.MeetPrevious {
		t.Fatalf("the first shares of a new gate do not ask for the meet with the previous one")
	}
	gate.Realized("node-1", share1.Generation)
	gate.Realized("node-2", share2.Generation)
	for _, ch := range []<-chan policy.Delta{deltas1, deltas2} {
		if d := receive(t, ch, "the release of the first share"); !d.Release {
			t.Fatalf("the delta after both first shares were realized is not their release: %+v", d)
		}
	}
	// A direct subscriber of the compiler tells when the deletion is compiled.
	_, compiled2, cancelDirect, err := compiler.Watch(ctx, "node-2")
	if err != nil {
		t.Fatal(err)
	}
	defer cancelDirect()

	denyX := &networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: "x", Name: "x-a-egress"},
		Spec: networkingv1.NetworkPolicySpec{PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeEgress}}}
	if _, err := client.NetworkingV1().NetworkPolicies("x").Create(ctx, denyX, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := client.NetworkingV1().NetworkPolicies("y").Delete(ctx, "y-ipblock", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	restriction := receive(t, deltas1, "node-1's restriction")
	if restriction.Isolation == nil || !restriction.Isolation.Equal(policy.Isolation{Egress: []policy.PodKey{{Namespace: "x", Name: "a", UID: "uid-ns-name"}}}) {
		t.Fatalf("node-1's first delta is not x/a's egress isolation: %+v", restriction)
	}
	for {
		d := receive(t, compiled2, "the compiler's delta of node-2")
		if d.Isolation != nil && len(d.Isolation.Ingress) == 0 {
			break
		}
	}
	// The deletion is compiled; node-1 has not reported: node-2 is still sent its isolation.
	gate.mu.Lock()
	sent := gate.core.nodes["node-2"].sent.Isolation
	waiting := gate.core.waiting()
	gate.mu.Unlock()
	if !sent.Isolated(policy.Ingress, "y", "b") {
		t.Fatalf("node-2 was sent its relaxation (isolation %+v) before node-1 realized its restriction", sent)
	}
	if len(waiting) != 1 || waiting[0] != "node-1" {
		t.Fatalf("the gate waits for %v, want node-1", waiting)
	}
	gate.Realized("node-1", restriction.Generation)
	relaxation := receive(t, deltas2, "node-2's relaxation")
	if relaxation.Isolation == nil || relaxation.Isolation.Isolated(policy.Ingress, yb.Namespace, yb.Name) {
		t.Fatalf("node-2's delta after node-1's report does not lift y/b's isolation: %+v", relaxation)
	}
	if relaxation.Generation <= restriction.Generation {
		t.Fatalf("relaxation generation %d not after the restriction's %d", relaxation.Generation, restriction.Generation)
	}
}

func receive(t *testing.T, ch <-chan policy.Delta, what string) policy.Delta {
	t.Helper()
	select {
	case d, ok := <-ch:
		if !ok {
			t.Fatalf("%s: channel closed", what)
		}
		return d
	case <-time.After(30 * time.Second):
		t.Fatalf("%s: nothing in 30 s", what)
	}
	return policy.Delta{}
}
