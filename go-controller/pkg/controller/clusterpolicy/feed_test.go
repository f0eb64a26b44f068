package clusterpolicy

import (
	"context"
	"fmt"
	"maps"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	corefake "k8s.io/client-go/kubernetes/fake"
	"sigs.k8s.io/network-policy-api/apis/v1beta1"
	"sigs.k8s.io/network-policy-api/pkg/client/clientset/versioned/fake"

	"github.com/kovs-net/kovs/go-controller/pkg/policy"
)

// batchSink records the feed's batches.
type batchSink struct{ batches chan policy.ClusterBatch }

func (s batchSink) UpdateClusterRules(b policy.ClusterBatch) { s.batches <- b }

func feedPod(name, node string, hostNetwork bool) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "x", Name: name, UID: types.UID("uid-" + name), Labels: map[string]string{"pod": name}},
		Spec: corev1.PodSpec{NodeName: node, HostNetwork: hostNetwork}, Status: corev1.PodStatus{Phase: corev1.PodRunning}}
}

func podKeyOf(name string) policy.PodKey {
	return policy.PodKey{Namespace: "x", Name: name, UID: "uid-" + name}
}

// feedRig runs a Feed on fake clientsets and keeps what its batches say together, as the
// compiler does.
type feedRig struct {
	t      *testing.T
	core   kubernetes.Interface
	cnps   *fake.Clientset
	feed   *Feed
	sink   batchSink
	pods   informers.SharedInformerFactory
	merged policy.ClusterBatch
	// batches are every batch taken so far.
	batches []policy.ClusterBatch
}

func newFeedRig(t *testing.T, objects ...*corev1.Pod) *feedRig {
	t.Helper()
	core := corefake.NewSimpleClientset(&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "x", Labels: map[string]string{"conformance-house": "x"}}})
	for _, p := range objects {
		if _, err := core.CoreV1().Pods("x").Create(context.Background(), p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	r := &feedRig{t: t, core: core, cnps: fake.NewSimpleClientset(), sink: batchSink{batches: make(chan policy.ClusterBatch, 100)},
		pods: informers.NewSharedInformerFactory(core, 0)}
	feed, err := NewFeed(r.cnps, r.pods, r.sink, 0)
	if err != nil {
		t.Fatal(err)
	}
	r.feed = feed
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	r.pods.Start(ctx.Done())
	go func() { _ = feed.Run(ctx) }()
	return r
}

// next waits for the feed's next batch, adds it to what the batches before said, and
// checks that together they evaluate every pod where a from-scratch read of the cluster
// would: the feed's incremental batches lose nothing.
func (r *feedRig) next(what string) policy.ClusterBatch {
	r.t.Helper()
	var b policy.ClusterBatch
	select {
	case b = <-r.sink.batches:
	case <-time.After(30 * time.Second):
		r.t.Fatalf("%s: the feed sent no batch", what)
	}
	r.take(b)
	return b
}

func (r *feedRig) take(b policy.ClusterBatch) {
	r.merged.Add(b)
	r.batches = append(r.batches, b)
}

// since is what the batches from the i-th on said: whether any had rules, and the pods
// they evaluated anew or forgot.
func (r *feedRig) since(i int) (rules bool, pods map[policy.PodKey]bool) {
	pods = map[policy.PodKey]bool{}
	for _, b := range r.batches[i:] {
		rules = rules || b.HasRules
		for k := range b.Evaluated {
			pods[k] = true
		}
		for k := range b.Forgotten {
			pods[k] = true
		}
	}
	return rules, pods
}

// settled waits until the informer's pods, read from scratch, are as seen says (the
// change is in), and the merged batches evaluate every pod where that read does.
func (r *feedRig) settled(what string, seen func(map[policy.PodKey]string) bool) {
	r.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		pods, _ := r.pods.Core().V1().Pods().Lister().List(labels.Everything())
		_, want := NewCluster(nil, pods, nil)
		if seen(want) && maps.Equal(r.merged.Evaluated, want) {
			return
		}
		if time.Now().After(deadline) {
			r.t.Fatalf("%s: the batches evaluate %v, a from-scratch read %v", what, r.merged.Evaluated, want)
		}
		select {
		case b := <-r.sink.batches:
			r.take(b)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// Each batch tells the sink where it evaluated every pod it can select: the node of a
// scheduled pod, "" for one not scheduled yet; never a pod it cannot select (the
// compiler would then list a pod whose cluster rules were never compiled). Without a
// ClusterNetworkPolicy the batches after the first name only the pods that changed.
func TestFeedSaysWhereItEvaluatedEachPod(t *testing.T) {
	r := newFeedRig(t, feedPod("scheduled", "node-1", false), feedPod("unscheduled", "", false), feedPod("host", "node-1", true))
	first := r.next("the first batch")
	want := map[policy.PodKey]string{podKeyOf("scheduled"): "node-1", podKeyOf("unscheduled"): ""}
	if !maps.Equal(first.Evaluated, want) || !first.HasRules || len(first.Forgotten) != 0 {
		t.Fatalf("the first batch: evaluated %v, rules %v, forgotten %v; want %v with rules (none) and nothing forgotten",
			first.Evaluated, first.HasRules, first.Forgotten, want)
	}
	ctx := context.Background()
	// Without a ClusterNetworkPolicy, each change is one pod's: the batches name only it,
	// and carry no rules.
	at := func(name, node string) func(map[policy.PodKey]string) bool {
		return func(m map[policy.PodKey]string) bool { n, ok := m[podKeyOf(name)]; return ok && n == node }
	}
	gone := func(k policy.PodKey) func(map[policy.PodKey]string) bool {
		return func(m map[policy.PodKey]string) bool { _, ok := m[k]; return !ok }
	}
	only := func(what string, seen func(map[policy.PodKey]string) bool, mark int, want ...string) {
		t.Helper()
		r.settled(what, seen)
		rules, pods := r.since(mark)
		wantPods := map[policy.PodKey]bool{}
		for _, k := range want {
			wantPods[podKeyOf(k)] = true
		}
		if rules || !maps.Equal(pods, wantPods) {
			t.Errorf("%s: the batches since carry rules %v and name %v; want no rules and %v", what, rules, pods, wantPods)
		}
	}
	mark := len(r.batches)
	bound := feedPod("unscheduled", "node-2", false)
	if _, err := r.core.CoreV1().Pods("x").Update(ctx, bound, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	only("x/unscheduled bound to node-2", at("unscheduled", "node-2"), mark, "unscheduled")
	mark = len(r.batches)
	if err := r.core.CoreV1().Pods("x").Delete(ctx, "scheduled", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	only("x/scheduled deleted", gone(podKeyOf("scheduled")), mark, "scheduled")
	if !r.merged.Forgotten[podKeyOf("scheduled")] {
		t.Errorf("x/scheduled deleted, not forgotten: %v", r.merged.Forgotten)
	}
	// Created again under the same name (a new UID).
	again := feedPod("scheduled", "node-3", false)
	again.UID = "uid-scheduled-2"
	if _, err := r.core.CoreV1().Pods("x").Create(ctx, again, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	r.settled("x/scheduled created again", func(m map[policy.PodKey]string) bool {
		return m[policy.PodKey{Namespace: "x", Name: "scheduled", UID: "uid-scheduled-2"}] == "node-3"
	})
	// A pod that finished is forgotten.
	finished := bound.DeepCopy()
	finished.Status.Phase = corev1.PodSucceeded
	if _, err := r.core.CoreV1().Pods("x").Update(ctx, finished, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	r.settled("x/unscheduled succeeded", gone(podKeyOf("unscheduled")))
	if _, ok := r.merged.Evaluated[podKeyOf("unscheduled")]; ok || !r.merged.Forgotten[podKeyOf("unscheduled")] {
		t.Errorf("a pod that succeeded is still evaluated: %v (forgotten %v)", r.merged.Evaluated, r.merged.Forgotten)
	}

	// A ClusterNetworkPolicy: the batches carry rules while it exists, and the one after it
	// goes carries none; then the batches are one pod's again.
	p := cnp("p", admin, 1, "x")
	p.Spec.Ingress = []v1beta1.ClusterNetworkPolicyIngressRule{ingress(deny, "x")}
	if _, err := r.cnps.PolicyV1beta1().ClusterNetworkPolicies().Create(ctx, p, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for b := r.next("the policy created"); len(b.Rules["node-3"]) == 0; b = r.next("the policy created") {
	}
	for i := range 3 {
		p := feedPod(fmt.Sprintf("new-%d", i), "node-1", false)
		if _, err := r.core.CoreV1().Pods("x").Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	r.settled("three pods created with a policy", func(m map[policy.PodKey]string) bool { return len(m) == 4 })
	if len(r.merged.Rules["node-1"]) == 0 {
		t.Errorf("three pods the policy selects on node-1, and node-1 has no rules: %v", r.merged.Rules)
	}
	if err := r.cnps.PolicyV1beta1().ClusterNetworkPolicies().Delete(ctx, "p", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	for b := r.next("the policy deleted"); !b.HasRules || len(b.Rules) != 0; b = r.next("the policy deleted") {
	}
	mark = len(r.batches)
	if err := r.core.CoreV1().Pods("x").Delete(ctx, "new-0", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	only("x/new-0 deleted without a policy", gone(podKeyOf("new-0")), mark, "new-0")
}
