package realization

import (
	"context"
	"fmt"
	"net/netip"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"

	"github.com/kovs-net/kovs/go-controller/pkg/controller/cachetrim"
	"github.com/kovs-net/kovs/go-controller/pkg/growth"
	"github.com/kovs-net/kovs/go-controller/pkg/policy"
)

// policyPerPod is a cluster of one namespace of n pods on 10 nodes and n policies, one
// per pod (as in Antrea's perf test's shape of a policy per pod), over the controller's
// informers, which have delivered their initial lists to its handlers.
type policyPerPod struct {
	c        *Controller
	pods     []*corev1.Pod
	policies []*networkingv1.NetworkPolicy
	stop     func()
}

func newPolicyPerPod(b *testing.B, n int) *policyPerPod {
	objs := []runtime.Object{namespace("x")}
	x := &policyPerPod{}
	for i := range n {
		p := pod(fmt.Sprint("pod-", i), fmt.Sprint("node", i%10), fmt.Sprint("pod=p", i))
		np := policyObj(fmt.Sprint("np-", i), fmt.Sprint("pod=p", i))
		x.pods, x.policies = append(x.pods, p), append(x.policies, np)
		objs = append(objs, p, np)
	}
	c, policies, stop := startController(b, objs)
	// Let the handlers take the initial list before the work.
	for policies.LastSyncResourceVersion() == "" || c.ctl.Len() < n {
		time.Sleep(time.Millisecond)
	}
	x.c, x.stop = c, stop
	return x
}

// startController runs the controller over a fake cluster of objs until stop, once its
// NetworkPolicy and Pod informers have synced; it returns the first too.
func startController(tb testing.TB, objs []runtime.Object) (*Controller, cache.SharedIndexInformer, func()) {
	client := fake.NewClientset(objs...)
	factory := cachetrim.NewSharedInformerFactory(client, 0)
	c, err := New(factory, client, record.NewFakeRecorder(1), Options{})
	if err != nil {
		tb.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	factory.Start(ctx.Done())
	policies, pods := factory.Networking().V1().NetworkPolicies().Informer(), factory.Core().V1().Pods().Informer()
	if !cache.WaitForCacheSync(ctx.Done(), policies.HasSynced, pods.HasSynced) {
		tb.Fatal("informers did not sync")
	}
	return c, policies, func() { cancel(); factory.Shutdown() }
}

// BenchmarkPodEventPolicyGrowth grows the policies of a namespace with its pods
// (policyPerPod). The work relabels every pod 40 times through the controller's pod
// handler, which enqueues the policies that select the pod before and after: one each.
// (The ratios are of package growth: see docs/scale.md.)
func BenchmarkPodEventPolicyGrowth(b *testing.B) {
	const rounds = 40
	growth.Ratio2x(b, 250, func(n int) func() {
		x := newPolicyPerPod(b, n)
		versions := make([][]*corev1.Pod, len(x.pods))
		for i, p := range x.pods {
			for r := range rounds {
				p = p.DeepCopy()
				p.Labels["rev"] = fmt.Sprint(r)
				versions[i] = append(versions[i], p)
			}
		}
		return func() {
			defer x.stop()
			for r := range rounds {
				for i, vs := range versions {
					old := x.pods[i]
					if r > 0 {
						old = vs[r-1]
					}
					x.c.podChanged(old, vs[r])
				}
			}
		}
	})
}

// BenchmarkPolicyStatusGrowth grows the policies of a namespace with its pods
// (policyPerPod). The work computes the realization status of every policy 20 times, as
// a reconcile of each does: each policy selects one pod.
func BenchmarkPolicyStatusGrowth(b *testing.B) {
	const rounds = 20
	growth.Ratio2x(b, 250, func(n int) func() {
		x := newPolicyPerPod(b, n)
		return func() {
			defer x.stop()
			for range rounds {
				for _, np := range x.policies {
					if st, err := x.c.status(np); err != nil || st.Concerned != 1 {
						b.Fatalf("status of %s: %s, %v; want 1 concerned node", np.Name, st, err)
					}
				}
			}
		}
	})
}

// BenchmarkTrackerSetChangeGrowth grows the rules of a node: one node's share with n
// policies of one rule each, applied to a set of its own and admitting an address set
// of its own. The work sends the tracker deltas that patch the address sets, one set per
// delta, five times over: each concerns one policy.
func BenchmarkTrackerSetChangeGrowth(b *testing.B) {
	const rounds = 5
	growth.Ratio2x(b, 2000, func(n int) func() {
		tr := NewTracker(func([]types.NamespacedName, []policy.PodKey, string) {})
		share := policy.NewNodeShare("node1")
		share.Generation = 1
		for i := range n {
			to, peer := fmt.Sprint("to-", i), fmt.Sprint("peer-", i)
			id := RuleID("x", fmt.Sprint("np-", i), policy.Ingress, 0)
			share.Rules[id] = policy.Rule{ID: id, Policy: policy.PolicyRef{Namespace: "x", Name: fmt.Sprint("np-", i)},
				Direction: policy.Ingress, Action: policy.ActionAllow, AppliedTo: to, Peers: []string{peer}}
			share.AppliedToSets[to] = policy.AppliedToSet{ID: to}
			share.AddressSets[peer] = policy.AddressSet{ID: peer}
		}
		if err := tr.snapshot("node1", share); err != nil {
			b.Fatal(err)
		}
		var deltas []policy.Delta
		gen := share.Generation
		for r := range rounds {
			for i := range n {
				addr := netip.PrefixFrom(netip.AddrFrom4([4]byte{10, byte(r), byte(i >> 8), byte(i)}), 32)
				patch := policy.AddressSetPatch{ID: fmt.Sprint("peer-", i), Added: []netip.Prefix{addr}}
				if r > 0 {
					patch.Removed = []netip.Prefix{netip.PrefixFrom(netip.AddrFrom4([4]byte{10, byte(r - 1), byte(i >> 8), byte(i)}), 32)}
				}
				deltas = append(deltas, policy.Delta{Node: "node1", FromGeneration: gen, Generation: gen + 1,
					UpdatedAddressSets: []policy.AddressSetPatch{patch}})
				gen++
			}
		}
		return func() {
			for _, d := range deltas {
				if err := tr.delta("node1", d); err != nil {
					b.Fatal(err)
				}
			}
		}
	})
}

// wideStatus is a policy over n nodes: pod w-i on node-i labelled app=wide, policy "wide"
// isolating them for ingress with one rule (from app=wide to port 80), and every node's
// share reflecting it at generation 10, not yet reported, over the controller's
// informers and tracker.
type wideStatus struct {
	c     *Controller
	np    *networkingv1.NetworkPolicy
	nodes []string
	stop  func()
}

// wideRule is the policy's rule in every node's share.
var wideRule = policy.Rule{ID: RuleID("x", "wide", policy.Ingress, 0), Policy: policy.PolicyRef{Namespace: "x", Name: "wide", UID: "uid-wide"},
	Direction: policy.Ingress, AppliedTo: "wide-to", Peers: []string{"wide-peers"},
	Ports: []policy.Port{{Protocol: policy.TCP, Port: 80}}, Action: policy.ActionAllow}

func newWideStatus(tb testing.TB, n int) *wideStatus {
	objs := []runtime.Object{namespace("x")}
	np := policyObj("wide", "app=wide", allowFrom("app=wide", 80))
	objs = append(objs, np)
	x := &wideStatus{np: np}
	shares := make([]policy.NodeShare, n)
	for i := range n {
		node := fmt.Sprint("node-", i)
		p := pod(fmt.Sprint("w-", i), node, "app=wide")
		objs = append(objs, p)
		x.nodes = append(x.nodes, node)
		s := policy.NewNodeShare(node)
		s.Generation = 10
		s.Isolation.Ingress = []policy.PodKey{{Namespace: "x", Name: p.Name, UID: string(p.UID)}}
		s.AppliedToSets["wide-to"] = policy.AppliedToSet{ID: "wide-to", Pods: []policy.AppliedPod{{PodKey: s.Isolation.Ingress[0]}}}
		s.AddressSets["wide-peers"] = policy.AddressSet{ID: "wide-peers"}
		s.Rules[wideRule.ID] = wideRule
		shares[i] = s
	}
	c, _, stop := startController(tb, objs)
	for i, s := range shares {
		if err := c.tracker.snapshot(x.nodes[i], s); err != nil {
			tb.Fatal(err)
		}
	}
	x.c, x.stop = c, stop
	return x
}

// BenchmarkReportStatusGrowth grows the nodes of one policy (wideStatus). The work: every
// node reports the generation the policy needs, one after the other, and the policy's
// status is computed after each report, as a report's reconcile does. Computed whole, a
// status asks about every node: O(n) per report, O(n²) per wave.
func BenchmarkReportStatusGrowth(b *testing.B) {
	growth.Ratio2x(b, 1000, func(n int) func() {
		x := newWideStatus(b, n)
		if st, err := x.c.status(x.np); err != nil || st.Concerned != n || st.Realized != 0 {
			b.Fatalf("before the reports: %s, %v", st, err)
		}
		return func() {
			defer x.stop()
			for i, node := range x.nodes {
				x.c.tracker.Realized(node, 10)
				if st, err := x.c.status(x.np); err != nil || st.Realized != i+1 {
					b.Fatalf("after %d reports: %s, %v", i+1, st, err)
				}
			}
		}
	})
}
