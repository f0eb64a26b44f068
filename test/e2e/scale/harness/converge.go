package harness

import (
	"bytes"
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/kovs-net/kovs/go-controller/pkg/controller/networkpolicy"
	"github.com/kovs-net/kovs/go-controller/pkg/policy"
	"github.com/kovs-net/kovs/test/e2e/framework"
)

// clusterObjects are what a from-scratch compile takes.
type clusterObjects struct {
	namespaces []*corev1.Namespace
	pods       []*corev1.Pod
	policies   []*networkingv1.NetworkPolicy
}

// Divergence is the outcome of comparing every agent's share with a from-scratch compile.
type Divergence struct {
	// Unallocated counts pods without their address; Diverged the agents whose share is
	// not the compile's; Example shows the first of them.
	Unallocated, Diverged int
	Example               string
}

func (d Divergence) converged() bool { return d.Unallocated == 0 && d.Diverged == 0 }

func (d Divergence) Error() string {
	return fmt.Sprintf("%d pods without an address, %d agents whose share differs from a from-scratch compile%s",
		d.Unallocated, d.Diverged, d.Example)
}

// compare compiles every node's share from scratch with the controller's own reference
// compiler (networkpolicy.Compile, what its incremental compiler is tested against) and
// compares each agent's share with its node's, generation aside.
func (h *Harness) compare(objs clusterObjects) Divergence {
	var d Divergence
	for _, p := range objs.pods {
		if !hasPodNetwork(p) {
			d.Unallocated++
		}
	}
	scratch := networkpolicy.Compile(objs.namespaces, objs.pods, objs.policies)
	for _, a := range h.sortedAgents() {
		want, ok := scratch[a.node]
		if !ok {
			want = policy.NewNodeShare(a.node)
		}
		got, have := a.Share()
		gotJSON, wantJSON := framework.ShareJSON(got), framework.ShareJSON(want)
		if have && bytes.Equal(gotJSON, wantJSON) {
			continue
		}
		d.Diverged++
		if d.Example == "" {
			d.Example = fmt.Sprintf("\nfirst: %s (snapshot received: %v)\n  agent   %s\n  scratch %s", a.node, have, framework.Clip(gotJSON), framework.Clip(wantJSON))
		}
	}
	return d
}

// hasPodNetwork reports whether the pod runs with its addresses (status.podIPs).
func hasPodNetwork(p *corev1.Pod) bool { return len(p.Status.PodIPs) > 0 }

// cached reads the objects from the harness's informers.
func (h *Harness) cached() (clusterObjects, error) {
	var o clusterObjects
	var err error
	if o.namespaces, err = h.factory.Core().V1().Namespaces().Lister().List(labels.Everything()); err != nil {
		return o, err
	}
	if o.pods, err = h.factory.Core().V1().Pods().Lister().List(labels.Everything()); err != nil {
		return o, err
	}
	o.policies, err = h.factory.Networking().V1().NetworkPolicies().Lister().List(labels.Everything())
	return o, err
}

// fresh lists the objects from kube-apiserver.
func (h *Harness) fresh(ctx context.Context) (clusterObjects, error) {
	var o clusterObjects
	ns, err := h.workload.CoreV1().Namespaces().List(ctx, metav1.ListOptions{})
	if err != nil {
		return o, err
	}
	pods, err := h.workload.CoreV1().Pods("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return o, err
	}
	nps, err := h.workload.NetworkingV1().NetworkPolicies("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return o, err
	}
	for i := range ns.Items {
		o.namespaces = append(o.namespaces, &ns.Items[i])
	}
	for i := range pods.Items {
		o.pods = append(o.pods, &pods.Items[i])
	}
	for i := range nps.Items {
		o.policies = append(o.policies, &nps.Items[i])
	}
	return o, nil
}

// waitConverged waits until every agent's share equals the compile of the objects read.
func (h *Harness) waitConverged(ctx context.Context, read func() (clusterObjects, error)) error {
	var last Divergence
	return waitUntil(ctx, h.cfg.ConvergenceTimeout, time.Second, "every agent to converge", func() error {
		objs, err := read()
		if err != nil {
			return err
		}
		if last = h.compare(objs); !last.converged() {
			return last
		}
		return nil
	})
}

// waitFirstConvergence times the initial workload to every agent's exact share. The
// check polls, but the instant it reports is exact: the last event the converged state
// needed, the last agent's last message or the last pod's address.
func (h *Harness) waitFirstConvergence(ctx context.Context) error {
	if err := h.waitConverged(ctx, h.cached); err != nil {
		return err
	}
	h.result.FirstConvergence = h.alloc.lastAllocation()
	for _, a := range h.sortedAgents() {
		if t := time.Unix(0, a.lastApplied.Load()); t.After(h.result.FirstConvergence) {
			h.result.FirstConvergence = t
		}
	}
	h.result.ConvergenceSeen = time.Now()
	h.result.InitialAllocationAfterCreate = h.alloc.afterCreateResults()
	h.result.InitialDelivery, h.result.InitialOnNode = h.alloc.splitResults()
	h.result.InitialAllocation, _, _ = h.alloc.results()
	return nil
}

// verifyFinal checks, after the churn, that every agent's share is exactly what a
// from-scratch compile of the objects listed from kube-apiserver gives its node.
// It waits on the informers' copies first: listing every pod from kube-apiserver each
// second would load it more than the churn did.
func (h *Harness) verifyFinal(ctx context.Context) error {
	start := time.Now()
	err := h.waitConverged(ctx, h.cached)
	if err == nil {
		err = h.waitConverged(ctx, func() (clusterObjects, error) { return h.fresh(ctx) })
	}
	h.result.FinalConvergence = time.Since(start)
	if err != nil {
		return err
	}
	h.result.Verified = len(h.agents)
	return nil
}
