package transition_test

import (
	"context"
	"fmt"
	"io"
	"net/netip"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/record"

	"github.com/kovs-net/kovs/go-controller/pkg/controller/cachetrim"
	"github.com/kovs-net/kovs/go-controller/pkg/controller/networkpolicy"
	"github.com/kovs-net/kovs/go-controller/pkg/controller/realization"
	"github.com/kovs-net/kovs/go-controller/pkg/controller/transition"
	"github.com/kovs-net/kovs/go-controller/pkg/growth"
	"github.com/kovs-net/kovs/go-controller/pkg/policy"
	"github.com/kovs-net/kovs/go-controller/pkg/policy/stream"
)

// The fan-out benchmarks grow the changes that reach every node (the scale harness's
// fan-out phase): n nodes with one pod each in namespace "wide", as kovs-controller
// wires its parts (the compiler, the transition gate, the realization controller and
// its tracker, following every node) and one simulated agent per node that watches the
// gate, encodes each delta as the stream server does, applies it and reports it
// realized at once. Linear is a cost per change proportional to the nodes it reaches.

const wideNS = "wide"

// fanOut is a running controller over a cluster of n nodes with one wide pod each.
type fanOut struct {
	client *fake.Clientset
	nodes  int
	stop   func()
	// enc encodes each agent's messages as the stream server does, one encoder for all.
	enc *stream.Encoder

	mu sync.Mutex
	// sets is the agents' memo: on its own node an agent's patch of a set costs the set's
	// size, which is no cost of the controller's; shared here, it costs the benchmark's
	// process once per change, not once per node.
	sets *policy.SetMemo
	// want is what the work waits for on every node; left counts the nodes that do not
	// have it yet, done is closed when none is left.
	want func(*policy.NodeShare) bool
	has  map[string]bool
	left int
	done chan struct{}
}

func widePod(name, node string, ip netip.Addr) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: wideNS, Name: name, UID: types.UID("uid-" + name),
		Labels: map[string]string{"app": "wide"}},
		Spec:   corev1.PodSpec{NodeName: node},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: ip.String(), PodIPs: []corev1.PodIP{{IP: ip.String()}}}}
}

// widePolicy selects every wide pod and admits every wide pod: each node holds a rule
// for its pod and the address set of all of them.
func widePolicy(name string) *networkingv1.NetworkPolicy {
	wide := metav1.LabelSelector{MatchLabels: map[string]string{"app": "wide"}}
	return &networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: wideNS, Name: name, UID: types.UID("uid-" + name)},
		Spec: networkingv1.NetworkPolicySpec{PodSelector: wide, PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress},
			Ingress: []networkingv1.NetworkPolicyIngressRule{{From: []networkingv1.NetworkPolicyPeer{{PodSelector: &wide}}}}}}
}

// podAddr is the address of the i-th pod of the cluster.
func podAddr(i int) netip.Addr {
	return netip.AddrFrom4([4]byte{10, byte(i >> 16), byte(i >> 8), byte(i)})
}

func nodeName(i int) string { return fmt.Sprint("node-", i) }

// newFanOut starts the controller's parts over n nodes, one wide pod on each, and the
// objects of extra, and waits until every agent has realized its first share with what
// ready wants.
func newFanOut(b *testing.B, n int, ready func(*policy.NodeShare) bool, extra ...runtime.Object) *fanOut {
	objs := []runtime.Object{&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: wideNS}}}
	for i := range n {
		objs = append(objs, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: nodeName(i)}},
			widePod(fmt.Sprint("wide-", i), nodeName(i), podAddr(i)))
	}
	client := fake.NewClientset(append(objs, extra...)...)
	factory := cachetrim.NewSharedInformerFactory(client, 0)
	compiler, err := networkpolicy.New(factory, networkpolicy.Options{})
	if err != nil {
		b.Fatal(err)
	}
	status, err := realization.New(factory, client, record.NewFakeRecorder(1), realization.Options{})
	if err != nil {
		b.Fatal(err)
	}
	gate := transition.New(compiler, transition.Options{})
	nodes := factory.Core().V1().Nodes().Informer()
	ctx, cancel := context.WithCancel(context.Background())
	factory.Start(ctx.Done())
	run := func(f func()) { go f() }
	run(func() { _ = compiler.Run(ctx) })
	run(func() { _ = gate.Run(ctx) })
	run(func() { _ = status.Run(ctx, gate, nodes) })
	f := &fanOut{client: client, nodes: n, sets: policy.NewSetMemo(), enc: stream.NewEncoder()}
	f.expect(ready)
	reports := []stream.Reports{gate, status.Reports()}
	for i := range n {
		run(func() { f.agent(ctx, b, gate, nodeName(i), reports) })
	}
	f.wait()
	f.stop = cancel
	return f
}

// agent follows a node's share as kovs-agent does, without a switch to program.
func (f *fanOut) agent(ctx context.Context, b *testing.B, gate *transition.Gate, node string, reports []stream.Reports) {
	share, deltas, cancel, err := gate.Watch(ctx, node)
	if err != nil {
		return
	}
	defer cancel()
	realized := func() {
		for _, r := range reports {
			r.Realized(node, share.Generation)
		}
		f.check(node, &share)
	}
	if err := f.enc.Write(io.Discard, stream.Message{Type: stream.MessageSnapshot, Generation: share.Generation, Snapshot: &share}); err != nil {
		b.Error(err)
	}
	realized()
	for d := range deltas {
		if err := f.enc.Write(io.Discard, stream.Message{Type: stream.MessageDelta, Generation: d.Generation, Delta: &d}); err != nil {
			b.Error(err)
		}
		f.mu.Lock()
		err := d.ApplyWith(&share, f.sets)
		f.mu.Unlock()
		if err != nil {
			b.Errorf("node %s: %v", node, err)
			return
		}
		realized()
	}
}

// expect makes the next wait wait until every node's share satisfies want.
func (f *fanOut) expect(want func(*policy.NodeShare) bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.sets.Reset()
	f.want, f.has, f.left, f.done = want, map[string]bool{}, f.nodes, make(chan struct{})
}

func (f *fanOut) check(node string, share *policy.NodeShare) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.has[node] || f.left == 0 || !f.want(share) {
		return
	}
	f.has[node] = true
	if f.left--; f.left == 0 {
		close(f.done)
	}
}

func (f *fanOut) wait() { <-f.done }

// holds reports whether a share's address sets hold addr (want) or not.
func holds(addr netip.Addr, want bool) func(*policy.NodeShare) bool {
	return func(s *policy.NodeShare) bool {
		for _, set := range s.AddressSets {
			if set.Contains(addr) {
				return want
			}
		}
		return !want && len(s.AddressSets) > 0
	}
}

// hasRules reports whether a share has rules (want) or none.
func hasRules(want bool) func(*policy.NodeShare) bool {
	return func(s *policy.NodeShare) bool { return (len(s.Rules) > 0) == want }
}

// BenchmarkFanOutAddressGrowth: one policy over the wide pods admits them all, so every
// node holds the set of all n addresses. The work creates a pod of the namespace and
// deletes it, three times: its address enters and leaves the set on every node (the
// fan-out phase's 27 s at 5,000 nodes, though each node receives one small patch).
func BenchmarkFanOutAddressGrowth(b *testing.B) {
	const rounds = 3
	growth.Ratio2x(b, 500, func(n int) func() {
		f := newFanOut(b, n, holds(podAddr(n-1), true), widePolicy("wide-peers"))
		b.Cleanup(f.stop)
		return func() {
			ctx := context.Background()
			for r := range rounds {
				addr := podAddr(n + r)
				p := widePod(fmt.Sprint("extra-", r), nodeName(r), addr)
				f.expect(holds(addr, true))
				if _, err := f.client.CoreV1().Pods(wideNS).Create(ctx, p, metav1.CreateOptions{}); err != nil {
					b.Fatal(err)
				}
				f.wait()
				f.expect(holds(addr, false))
				if err := f.client.CoreV1().Pods(wideNS).Delete(ctx, p.Name, metav1.DeleteOptions{}); err != nil {
					b.Fatal(err)
				}
				f.wait()
			}
		}
	})
}

// BenchmarkFanOutPolicyGrowth: no policy at first; the work creates a policy over the
// wide pods that admits them all and deletes it, three times: every node gets a rule and
// the set of all n addresses, then loses them (the fan-out phase's policy probes).
func BenchmarkFanOutPolicyGrowth(b *testing.B) {
	const rounds = 3
	growth.Ratio2x(b, 500, func(n int) func() {
		f := newFanOut(b, n, hasRules(false))
		b.Cleanup(f.stop)
		return func() {
			ctx := context.Background()
			policies := f.client.NetworkingV1().NetworkPolicies(wideNS)
			for r := range rounds {
				np := widePolicy(fmt.Sprint("wide-", r))
				f.expect(hasRules(true))
				if _, err := policies.Create(ctx, np, metav1.CreateOptions{}); err != nil {
					b.Fatal(err)
				}
				f.wait()
				f.expect(hasRules(false))
				if err := policies.Delete(ctx, np.Name, metav1.DeleteOptions{}); err != nil {
					b.Fatal(err)
				}
				f.wait()
			}
		}
	})
}
