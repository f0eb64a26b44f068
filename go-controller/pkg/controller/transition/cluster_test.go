package transition

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/kovs-net/kovs/go-controller/pkg/controller/networkpolicy"
	"github.com/kovs-net/kovs/go-controller/pkg/policy"
)

// Cluster rules go from the compiler (UpdateClusterRules) through the gate to a node: in its
// first share, then as deltas that replace them whole. A Deny that becomes an Accept
// is a relaxation: the node keeps the Deny until the gate releases it.
func TestGateCarriesClusterRules(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	a := policy.PodKey{Namespace: "x", Name: "a", UID: "uid-a"}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "x", Name: "a", UID: "uid-a"}, Spec: corev1.PodSpec{NodeName: "node-1"},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIPs: []corev1.PodIP{{IP: "10.0.1.1"}}}}
	client := fake.NewClientset(&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "x"}}, pod)
	factory := informers.NewSharedInformerFactory(client, 0)
	compiler, err := networkpolicy.New(factory, networkpolicy.Options{})
	if err != nil {
		t.Fatal(err)
	}
	compiler.ExpectClusterRules()
	gate := New(compiler, Options{Base: 1000, Timeout: time.Hour})
	factory.Start(ctx.Done())
	go func() { _ = compiler.Run(ctx) }()
	go func() { _ = gate.Run(ctx) }()

	rule := func(action policy.ClusterAction) policy.ClusterRule {
		return policy.ClusterRule{ID: "p/ingress/0", Policy: "p", Tier: policy.TierAdmin, Priority: 1, Direction: policy.Ingress,
			Action: action, Subjects: []policy.PodKey{a}, AnyPeer: true}
	}
	deny := []policy.ClusterRule{rule(policy.ClusterDeny)}
	evaluated := map[policy.PodKey]string{a: "node-1"}
	compiler.UpdateClusterRules(policy.ClusterBatch{Rules: map[string][]policy.ClusterRule{"node-1": deny}, HasRules: true, Evaluated: evaluated})
	share, deltas, stop, err := gate.Watch(ctx, "node-1")
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	if !policy.EqualClusterRules(share.ClusterRules, deny) {
		t.Fatalf("node-1's first share has cluster rules %+v, want %+v", share.ClusterRules, deny)
	}
	gate.Realized("node-1", share.Generation)
	if d := receive(t, deltas, "the release of the first share"); !d.Release {
		t.Fatalf("not the release: %+v", d)
	}

	accept := []policy.ClusterRule{rule(policy.ClusterAccept)}
	compiler.UpdateClusterRules(policy.ClusterBatch{Rules: map[string][]policy.ClusterRule{"node-1": accept}, HasRules: true})
	d := receive(t, deltas, "the Accept")
	if d.ClusterRules == nil || !policy.EqualClusterRules(*d.ClusterRules, accept) {
		t.Fatalf("node-1's delta after the Deny became an Accept has cluster rules %+v, want %+v", d.ClusterRules, accept)
	}
	compiler.UpdateClusterRules(policy.ClusterBatch{Rules: map[string][]policy.ClusterRule{}, HasRules: true})
	d = receive(t, deltas, "the rule's removal")
	if d.ClusterRules == nil || len(*d.ClusterRules) != 0 {
		t.Fatalf("node-1's delta after its rules went does not empty them: %+v", d.ClusterRules)
	}
}
