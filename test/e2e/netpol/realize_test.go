package netpol_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kovs-net/kovs/go-controller/pkg/controller/realization"
	"github.com/kovs-net/kovs/test/e2e/framework"
)

const (
	// realizeTimeout bounds how long a step may take to be reported realized.
	realizeTimeout = 30 * time.Second
	// barrierNamespace holds one pod per node and, for each step, a barrier policy.
	barrierNamespace = "kovs-barrier"
	nodeCount        = 3
)

// createBarrierPods starts one pod on every node in the barrier namespace: a barrier
// policy selecting them concerns every node. No case probes them.
func (m *modelCluster) createBarrierPods(t *testing.T) {
	m.s.EnsureNamespace(t, barrierNamespace, map[string]string{"kovs-test": "barrier"})
	for n := 1; n <= nodeCount; n++ {
		m.s.CreatePod(t, framework.PodSpec{Namespace: barrierNamespace, Name: fmt.Sprintf("b%d", n), Node: fmt.Sprintf("node%d", n)})
	}
	for n := 1; n <= nodeCount; n++ {
		m.s.WaitRunning(t, barrierNamespace, fmt.Sprintf("b%d", n), 90*time.Second)
	}
}

// waitRealized waits until the step's writes are enforced on every node. A write's own
// annotation may be read before the controller saw the write (and a deleted policy, or a
// relabelled pod, has none that changes), so first a barrier: a new policy over the
// barrier pods, made after the step's writes. The controller compiles NetworkPolicies in
// the order it sees them and counts one generation for all nodes; once every node
// realized the barrier's generation, every change compiled before it is installed. Then
// every policy of the case's namespaces must read complete ("3/3 nodes").
func (m *modelCluster) waitRealized(t *testing.T, what string) {
	t.Helper()
	deadline := time.Now().Add(realizeTimeout)
	m.barrier(t, what, deadline)
	err := pollUntil(time.Until(deadline), 50*time.Millisecond, func() error {
		incomplete, err := m.incompletePolicies()
		if err == nil && len(incomplete) > 0 {
			err = fmt.Errorf("%s", strings.Join(incomplete, "; "))
		}
		return err
	})
	if err != nil {
		t.Fatalf("%s: not realized after %s: %v", what, realizeTimeout, err)
	}
}

// barrier deletes the previous barrier policy, creates the next one and waits until it is
// realized on every node. The deletion comes first so that its own flow changes (and the
// datapath cache purge every policy change brings) are installed before the new barrier
// is, not while the step is probed.
func (m *modelCluster) barrier(t *testing.T, what string, deadline time.Time) {
	t.Helper()
	ctx := context.Background()
	c := m.s.Client.NetworkingV1().NetworkPolicies(barrierNamespace)
	if m.barriers > 0 {
		prev := fmt.Sprintf("barrier-%d", m.barriers)
		if err := c.Delete(ctx, prev, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			t.Fatalf("%s: delete barrier policy %s: %v", what, prev, err)
		}
	}
	m.barriers++
	np := &networkingv1.NetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{Namespace: barrierNamespace, Name: fmt.Sprintf("barrier-%d", m.barriers)},
		Spec: networkingv1.NetworkPolicySpec{PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress},
			Ingress: []networkingv1.NetworkPolicyIngressRule{{From: []networkingv1.NetworkPolicyPeer{
				{IPBlock: &networkingv1.IPBlock{CIDR: "192.0.2.0/24"}}}}}},
	}
	if _, err := c.Create(ctx, np, metav1.CreateOptions{}); err != nil {
		t.Fatalf("%s: barrier policy: %v", what, err)
	}
	err := pollUntil(time.Until(deadline), 20*time.Millisecond, func() error {
		got, err := c.Get(ctx, np.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		v := got.Annotations[realization.AnnotationKey]
		if st, err := realization.ParseStatus(v); err != nil || !st.Complete() || st.Concerned != nodeCount {
			return fmt.Errorf("%s=%q", realization.AnnotationKey, v)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("%s: barrier policy %s not realized on every node after %s: %v", what, np.Name, realizeTimeout, err)
	}
}

// incompletePolicies lists the policies of the case's namespaces whose realization
// annotation is missing or incomplete.
func (m *modelCluster) incompletePolicies() ([]string, error) {
	var out []string
	for _, ns := range m.namespaces {
		nps, err := m.policiesIn(ns)
		if err != nil {
			return nil, err
		}
		for _, np := range nps {
			v := np.Annotations[realization.AnnotationKey]
			if st, err := realization.ParseStatus(v); err != nil || !st.Complete() {
				out = append(out, fmt.Sprintf("%s/%s %s=%q", np.Namespace, np.Name, realization.AnnotationKey, v))
			}
		}
	}
	return out, nil
}

// nodeNames are the sandbox's nodes.
func (m *modelCluster) nodeNames(t *testing.T) []string {
	t.Helper()
	st, err := m.s.Layout.LoadState()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, n := range st.Nodes {
		names = append(names, n.Name)
	}
	return names
}

// fullResyncs counts every node's successful full flow resyncs so far.
func (m *modelCluster) fullResyncs(t *testing.T) map[string]float64 {
	t.Helper()
	out := map[string]float64{}
	for _, node := range m.nodeNames(t) {
		n, err := m.s.FullResyncs(node)
		if err != nil {
			t.Fatalf("full resyncs: %v", err)
		}
		out[node] = n
	}
	return out
}

// waitFullResyncs waits until every node finished n more full resyncs than since: with
// n = 2, at least one of them started after since was read.
func (m *modelCluster) waitFullResyncs(t *testing.T, since map[string]float64, n float64) {
	t.Helper()
	timeout := 10*resyncPeriod + 10*time.Second
	err := pollUntil(timeout, 50*time.Millisecond, func() error {
		for node, before := range since {
			now, err := m.s.FullResyncs(node)
			if err != nil {
				return err
			}
			if now < before+n {
				return fmt.Errorf("%s: %v full resyncs, want %v", node, now, before+n)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatalf("waiting %s for %v more full flow resyncs on every node: %v", timeout, n, err)
	}
}

// pollUntil calls check every interval until it returns nil or timeout has passed, and
// returns its last error.
func pollUntil(timeout, interval time.Duration, check func() error) error {
	deadline := time.Now().Add(timeout)
	for {
		err := check()
		if err == nil || time.Now().After(deadline) {
			return err
		}
		time.Sleep(interval)
	}
}
