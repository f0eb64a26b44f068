package networkpolicy

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/kovs-net/kovs/go-controller/pkg/controller/cachetrim"
	"github.com/kovs-net/kovs/go-controller/pkg/policy"
)

// startCompiler runs a compiler over a fake clientset holding the world's objects and
// waits until it is ready.
func startCompiler(t *testing.T, w *world) (*fake.Clientset, *Compiler) {
	t.Helper()
	return startCompilerWith(t, w, Options{})
}

// startCompilerWith is startCompiler with opts.
func startCompilerWith(t *testing.T, w *world, opts Options) (*fake.Clientset, *Compiler) {
	t.Helper()
	var objs []runtime.Object
	for _, ns := range w.namespaces {
		objs = append(objs, ns)
	}
	for _, p := range w.pods {
		objs = append(objs, p)
	}
	for _, np := range w.policies {
		objs = append(objs, np)
	}
	client := fake.NewSimpleClientset(objs...)
	factory := cachetrim.NewSharedInformerFactory(client, 0)
	c, err := New(factory, opts)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	factory.Start(ctx.Done())
	go func() { done <- c.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("compiler: %v", err)
		}
		factory.Shutdown()
	})
	select {
	case <-c.Ready():
	case <-time.After(10 * time.Second):
		t.Fatal("compiler not ready")
	}
	return client, c
}

// scratch compiles the objects the client holds now.
func scratch(t *testing.T, client kubernetes.Interface, node string) policy.NodeShare {
	t.Helper()
	ctx := context.Background()
	nsList, err := client.CoreV1().Namespaces().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	podList, err := client.CoreV1().Pods("").List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	npList, err := client.NetworkingV1().NetworkPolicies("").List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	shares := Compile(pointers(nsList.Items), pointers(podList.Items), pointers(npList.Items))
	if s, ok := shares[node]; ok {
		return s
	}
	return policy.NewNodeShare(node)
}

func pointers[T any](items []T) []*T {
	out := make([]*T, len(items))
	for i := range items {
		out[i] = &items[i]
	}
	return out
}

// converge applies deltas to share until it equals want, and returns how many it took.
func converge(t *testing.T, deltas <-chan policy.Delta, share *policy.NodeShare, want policy.NodeShare) int {
	t.Helper()
	n := 0
	timeout := time.After(10 * time.Second)
	for !bytes.Equal(shareJSON(t, *share), shareJSON(t, want)) {
		select {
		case d, ok := <-deltas:
			if !ok {
				t.Fatal("delta channel closed")
			}
			if err := d.Apply(share); err != nil {
				t.Fatal(err)
			}
			n++
		case <-timeout:
			t.Fatalf("share of %s did not converge:\n got %s\nwant %s", share.Node, shareJSON(t, *share), shareJSON(t, want))
		}
	}
	return n
}

func watch(t *testing.T, c *Compiler, node string) (policy.NodeShare, <-chan policy.Delta) {
	t.Helper()
	share, deltas, cancel, err := c.Watch(context.Background(), node)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cancel)
	return share.Clone(), deltas // Clone: the share's maps may be the compiler's
}

func TestWatchGetsOnlyItsNodeShare(t *testing.T) {
	w := newWorld()
	w.policies = pols(
		policyObj("x", "all", &metav1.LabelSelector{}, bothTypes(), in(from(nsPeer(sel("ns=y")))), out(to(podPeer(sel("pod=b"))))),
	)
	client, c := startCompiler(t, w)
	for _, node := range []string{"node-1", "node-2"} {
		share, _ := watch(t, c, node)
		if got, want := shareJSON(t, share), shareJSON(t, scratch(t, client, node)); !bytes.Equal(got, want) {
			t.Errorf("snapshot of %s:\n got %s\nwant %s", node, got, want)
		}
		for _, set := range share.AppliedToSets {
			for _, p := range set.Pods {
				if w.pod(p.Namespace+"/"+p.Name).Spec.NodeName != node {
					t.Errorf("share of %s lists pod %s/%s of another node", node, p.Namespace, p.Name)
				}
			}
		}
	}
	empty, _ := watch(t, c, "node-9")
	if len(empty.Rules)+len(empty.AddressSets)+len(empty.AppliedToSets) != 0 {
		t.Errorf("a node without pods got %+v", empty)
	}
}

func TestLabelChangesMovePodsInAndOut(t *testing.T) {
	w := newWorld()
	w.policies = pols(
		policyObj("x", "from-b", sel("pod=a"), nil, in(from(podPeer(sel("pod=b")), nsPeer(sel("team=blue")))), nil),
	)
	client, c := startCompiler(t, w)
	share, deltas := watch(t, c, "node-1")
	ctx := context.Background()
	update := func(mutate func()) {
		t.Helper()
		mutate()
		converge(t, deltas, &share, scratch(t, client, "node-1"))
	}
	peers := func() []string {
		r := share.Rules["x/from-b/ingress/0"]
		var out []string
		for _, id := range r.Peers {
			for _, a := range share.AddressSets[id].Addresses {
				out = append(out, a.String())
			}
		}
		return out
	}
	update(func() { // x/c gets pod=b: it becomes a peer
		p, _ := client.CoreV1().Pods("x").Get(ctx, "c", metav1.GetOptions{})
		p.Labels = labelSet("pod=b")
		mustUpdatePod(t, client, p)
	})
	if got := peers(); len(got) != 2 {
		t.Errorf("after relabel, peers = %v, want x/b and x/c", got)
	}
	update(func() { // namespace z joins team blue: all its pods become peers
		ns, _ := client.CoreV1().Namespaces().Get(ctx, "z", metav1.GetOptions{})
		ns.Labels["team"] = "blue"
		if _, err := client.CoreV1().Namespaces().Update(ctx, ns, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	})
	if got := peers(); len(got) != 5 {
		t.Errorf("after namespace relabel, peers = %v, want 5", got)
	}
	update(func() { // x/a loses pod=a: the policy no longer applies on node-1
		p, _ := client.CoreV1().Pods("x").Get(ctx, "a", metav1.GetOptions{})
		p.Labels = labelSet("pod=other")
		mustUpdatePod(t, client, p)
	})
	if len(share.Rules) != 0 || len(share.Isolation.Ingress) != 0 {
		t.Errorf("after x/a left the policy, node-1 share = %+v", share)
	}
}

func TestPolicyUpdateAndDelete(t *testing.T) {
	w := newWorld()
	w.policies = pols(policyObj("x", "np", sel("pod=a"), nil, in(from(podPeer(sel("pod=b")))), nil))
	client, c := startCompiler(t, w)
	share, deltas := watch(t, c, "node-1")
	ctx := context.Background()
	np, _ := client.NetworkingV1().NetworkPolicies("x").Get(ctx, "np", metav1.GetOptions{})
	np.Spec.PodSelector = *sel("pod=c")
	np.Spec.Ingress[0].Ports = ports("tcp/443")
	np.Spec.PolicyTypes = bothTypes()
	if _, err := client.NetworkingV1().NetworkPolicies("x").Update(ctx, np, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	converge(t, deltas, &share, scratch(t, client, "node-1"))
	if !share.Isolation.Isolated(policy.Egress, "x", "c") || share.Isolation.Isolated(policy.Ingress, "x", "a") {
		t.Errorf("isolation after update = %+v", share.Isolation)
	}
	if r := share.Rules["x/np/ingress/0"]; len(r.Ports) != 1 || r.Ports[0].Port != 443 {
		t.Errorf("rule after update = %+v", r)
	}
	if err := client.NetworkingV1().NetworkPolicies("x").Delete(ctx, "np", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	converge(t, deltas, &share, scratch(t, client, "node-1"))
	if len(share.Rules)+len(share.AddressSets)+len(share.AppliedToSets)+len(share.Isolation.Ingress)+len(share.Isolation.Egress) != 0 {
		t.Errorf("share after delete = %+v", share)
	}
}

// Every batch after the initial compile is reported with what it took from the informers
// and the nodes it woke; the initial compile of everything listed is not a batch.
func TestBatchesAreObserved(t *testing.T) {
	w := newWorld()
	w.policies = pols(policyObj("x", "np", sel("pod=a"), nil, in(from(podPeer(sel("pod=b")))), nil))
	batches := make(chan Batch, 16)
	client, c := startCompilerWith(t, w, Options{Observe: func(b Batch) { batches <- b }})
	share, deltas := watch(t, c, "node-1")
	select {
	case b := <-batches:
		t.Fatalf("the initial compile was observed as a batch: %+v", b)
	default:
	}
	ctx := context.Background()
	np, _ := client.NetworkingV1().NetworkPolicies("x").Get(ctx, "np", metav1.GetOptions{})
	np.Spec.Ingress[0].Ports = ports("tcp/443")
	if _, err := client.NetworkingV1().NetworkPolicies("x").Update(ctx, np, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	converge(t, deltas, &share, scratch(t, client, "node-1"))
	var b Batch
	select {
	case b = <-batches:
	case <-time.After(10 * time.Second):
		t.Fatal("no batch observed for the policy update")
	}
	if b.Policies != 1 || b.Pods != 0 || b.Namespaces != 0 || b.Subscribers != 1 {
		t.Errorf("batch = %+v, want 1 policy and the one subscriber of node-1 it concerns", b)
	}
	if b.Waited < 0 || b.Took <= 0 {
		t.Errorf("batch times = waited %s, took %s", b.Waited, b.Took)
	}
}

func TestNewPodOnNewNodeIsIsolatedBeforeItHasAddresses(t *testing.T) {
	w := newWorld()
	w.policies = pols(policyObj("x", "np", sel("pod=a"), nil, in(from(podPeer(sel("pod=b")))), nil))
	client, c := startCompiler(t, w)
	share, deltas := watch(t, c, "node-3")
	ctx := context.Background()
	p := podObj("x", "a2", "node-3", "pod=a") // scheduled, no addresses yet
	if _, err := client.CoreV1().Pods("x").Create(ctx, p, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	converge(t, deltas, &share, scratch(t, client, "node-3"))
	if !share.Isolation.Isolated(policy.Ingress, "x", "a2") || len(share.Rules) != 1 {
		t.Errorf("new pod's share = %+v", share)
	}
	p.Status.PodIPs = []corev1.PodIP{{IP: "10.0.3.1"}}
	mustUpdatePod(t, client, p)
	converge(t, deltas, &share, scratch(t, client, "node-3"))
	if err := client.CoreV1().Pods("x").Delete(ctx, "a2", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	converge(t, deltas, &share, scratch(t, client, "node-3"))
}

func TestCancelClosesTheChannel(t *testing.T) {
	_, c := startCompiler(t, newWorld())
	_, deltas, cancel, err := c.Watch(context.Background(), "node-1")
	if err != nil {
		t.Fatal(err)
	}
	cancel()
	cancel() // idempotent
	select {
	case _, ok := <-deltas:
		if ok {
			t.Error("delta after cancel")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("channel not closed after cancel")
	}
}

func mustUpdatePod(t *testing.T, client kubernetes.Interface, p *corev1.Pod) {
	t.Helper()
	if _, err := client.CoreV1().Pods(p.Namespace).Update(context.Background(), p, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// TestInformerPathConverges drives random changes through the fake API and checks that
// every node's subscriber converges to a from-scratch compile: it covers the handlers and
// their filters of irrelevant updates.
func TestInformerPathConverges(t *testing.T) {
	for seed := range 3 {
		t.Run(fmt.Sprint("seed-", seed), func(t *testing.T) {
			r := &randomCluster{rng: rand.New(rand.NewPCG(uint64(seed), 11)), ns: map[string]*corev1.Namespace{},
				pods: map[types.NamespacedName]*corev1.Pod{}, policies: map[types.NamespacedName]*networkingv1.NetworkPolicy{}}
			client, c := startCompiler(t, &world{})
			shares := make([]policy.NodeShare, 4)
			deltas := make([]<-chan policy.Delta, 4)
			for i := range shares {
				shares[i], deltas[i] = watch(t, c, fmt.Sprint("node-", i))
			}
			for step := 0; step < 30; step++ {
				for range 1 + r.rng.IntN(4) {
					r.apply(t, client)
				}
				for i := range shares {
					converge(t, deltas[i], &shares[i], scratch(t, client, shares[i].Node))
				}
			}
		})
	}
}

// apply makes one random change through the API.
func (r *randomCluster) apply(t *testing.T, client kubernetes.Interface) {
	t.Helper()
	ctx := context.Background()
	var err error
	switch r.rng.IntN(10) {
	case 0, 1:
		ns := r.namespace()
		_, exists := r.ns[ns.Name]
		r.ns[ns.Name] = ns
		if exists {
			_, err = client.CoreV1().Namespaces().Update(ctx, ns, metav1.UpdateOptions{})
		} else {
			_, err = client.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{})
		}
	case 2, 3, 4, 5:
		p := r.pod()
		key := podKey(p)
		old, exists := r.pods[key]
		switch {
		case exists && r.rng.IntN(6) == 0:
			delete(r.pods, key)
			err = client.CoreV1().Pods(p.Namespace).Delete(ctx, p.Name, metav1.DeleteOptions{})
		case exists:
			p.UID, p.Spec.NodeName, p.Spec.Containers = old.UID, old.Spec.NodeName, old.Spec.Containers
			r.pods[key] = p
			_, err = client.CoreV1().Pods(p.Namespace).Update(ctx, p, metav1.UpdateOptions{})
		default:
			r.pods[key] = p
			_, err = client.CoreV1().Pods(p.Namespace).Create(ctx, p, metav1.CreateOptions{})
		}
	default:
		np := r.policy()
		key := objectKey(np)
		_, exists := r.policies[key]
		switch {
		case exists && r.rng.IntN(5) == 0:
			delete(r.policies, key)
			err = client.NetworkingV1().NetworkPolicies(np.Namespace).Delete(ctx, np.Name, metav1.DeleteOptions{})
		case exists:
			r.policies[key] = np
			_, err = client.NetworkingV1().NetworkPolicies(np.Namespace).Update(ctx, np, metav1.UpdateOptions{})
		default:
			r.policies[key] = np
			_, err = client.NetworkingV1().NetworkPolicies(np.Namespace).Create(ctx, np, metav1.CreateOptions{})
		}
	}
	if err != nil {
		t.Fatal(err)
	}
}
