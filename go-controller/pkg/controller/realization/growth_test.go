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
	client := fake.NewClientset(objs...)
	factory := cachetrim.NewSharedInformerFactory(client, 0)
	c, err := New(factory, client, record.NewFakeRecorder(1), Options{})
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	factory.Start(ctx.Done())
	policies, podInformer := factory.Networking().V1().NetworkPolicies().Informer(), factory.Core().V1().Pods().Informer()
	if !cache.WaitForCacheSync(ctx.Done(), policies.HasSynced, podInformer.HasSynced) {
		b.Fatal("informers did not sync")
	}
	// Let the handlers take the initial list before the work.
	for policies.LastSyncResourceVersion() == "" || c.ctl.Len() < n {
		time.Sleep(time.Millisecond)
	}
	x.c, x.stop = c, func() { cancel(); factory.Shutdown() }
	return x
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
		tr := NewTracker(func([]types.NamespacedName, []policy.PodKey, bool) {})
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
