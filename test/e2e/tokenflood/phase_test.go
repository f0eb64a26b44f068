package tokenflood_test

import (
	"context"
	"crypto/x509"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/kovs-net/kovs/go-controller/pkg/controller/realization"
	"github.com/kovs-net/kovs/test/e2e/framework"
)

const (
	// podsPerPhase are created in each phase, one every podInterval, alternately on
	// node1 and node2.
	podsPerPhase = 20
	podInterval  = 100 * time.Millisecond
	// minPhase is the shortest phase: long enough to see several Lease renewals (every
	// 2 s).
	minPhase = 10 * time.Second
	// phaseTimeout bounds each wait of a phase (allocations, realization, the flood).
	phaseTimeout = 60 * time.Second
)

// cluster is a 2-node sandbox with the watches the phases read.
type cluster struct {
	s      *framework.Sandbox
	ca     *x509.CertPool
	lease  *leaseWatch
	allocs *allocWatch
	token  string
}

func newCluster(tb testing.TB, s *framework.Sandbox) *cluster {
	tb.Helper()
	c := &cluster{s: s}
	c.ca = s.ControllerCA(tb)
	c.lease = watchLease(tb, s.Client)
	c.allocs = watchAllocations(tb, s.Client)
	c.token = s.AgentToken(tb, "node1")
	s.WaitNodesReady(tb)
	return c
}

// phase is what one phase measured.
type phase struct {
	name string
	// alloc is each pod's time from its Create call to its kovs.io/pod-network
	// annotation, sorted; byPod the same in the order the pods were created.
	alloc, byPod []time.Duration
	// realized is the time from the policy's Create call until it was seen realized on
	// both nodes (polled every 250 ms).
	realized time.Duration
	lease    leaseWindow
	elapsed  time.Duration
	// With a flood: its answers, and the TokenReviews kube-apiserver served from just
	// before its release until its last answer (reviewWindow).
	flood        *floodResult
	reviews      float64
	reviewWindow time.Duration
}

func (p phase) String() string {
	return fmt.Sprintf("%s: allocation p50 %s p99 %s max %s (%d pods); Lease: longest without renewal %s (%d renewals in %s, duration %s); policy realized on 2/2 nodes after %s",
		p.name, ms(percentile(p.alloc, 50)), ms(percentile(p.alloc, 99)), ms(percentile(p.alloc, 100)), len(p.alloc),
		ms(p.lease.gap), p.lease.renewals, p.elapsed.Round(time.Millisecond), p.lease.duration, ms(p.realized))
}

// perPod lists the allocation latencies in the order the pods were created.
func (p phase) perPod() string {
	var b strings.Builder
	for _, d := range p.byPod {
		fmt.Fprintf(&b, " %s", ms(d))
	}
	return strings.TrimSpace(b.String())
}

func ms(d time.Duration) string { return d.Round(time.Millisecond).String() }

// run runs one phase in namespace ns: with junk > 0, that many junk requests are released
// at its start. It creates a NetworkPolicy over the namespace and podsPerPhase pods, and
// waits until every pod has its addresses, the policy is realized on both nodes, every
// junk request is answered, and minPhase has passed.
func (c *cluster) run(tb testing.TB, ns string, junk int) phase {
	tb.Helper()
	c.s.EnsureNamespace(tb, ns, nil)
	p := phase{name: ns}
	var f *flood
	var reviewsBefore float64
	var reviewsFrom time.Time
	if junk > 0 {
		f = prepareFlood(tb, c, junkRequests(tb, junk, c.token))
		reviewsFrom, reviewsBefore = time.Now(), c.tokenReviews(tb)
	}
	start := time.Now()
	if f != nil {
		f.release()
	}
	created := make(chan map[string]time.Time, 1)
	errc := make(chan error, 1)
	go func() {
		m, err := c.createPods(ns)
		created <- m
		errc <- err
	}()
	p.realized = c.createPolicy(tb, ns)
	pods := <-created
	if err := <-errc; err != nil {
		tb.Fatal(err)
	}
	if f != nil {
		res := f.wait()
		p.flood = &res
		// kube-apiserver counts a request just after answering it: give the last
		// reviews' counts a moment.
		time.Sleep(time.Second)
		p.reviews = c.tokenReviews(tb) - reviewsBefore
		p.reviewWindow = time.Since(reviewsFrom)
	}
	framework.Eventually(tb, phaseTimeout, "every pod of "+ns+" allocated", func() error {
		if _, missing := c.allocs.latencies(pods); len(missing) > 0 {
			return fmt.Errorf("%d of %d pods without %s: %v", len(missing), len(pods), "kovs.io/pod-network", missing)
		}
		return nil
	})
	p.byPod, _ = c.allocs.latencies(pods)
	p.alloc = slices.Sorted(slices.Values(p.byPod))
	c.waitRealized(tb, ns, "after all its pods")
	c.waitRunning(tb, ns, len(pods))
	if wait := minPhase - time.Since(start); wait > 0 {
		time.Sleep(wait)
	}
	end := time.Now()
	p.elapsed = end.Sub(start)
	p.lease = c.lease.window(start, end)
	return p
}

// createPods creates the phase's pods, one every podInterval, and returns their Create
// times.
func (c *cluster) createPods(ns string) (map[string]time.Time, error) {
	created := map[string]time.Time{}
	tick := time.NewTicker(podInterval)
	defer tick.Stop()
	for i := range podsPerPhase {
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("p%02d", i), Labels: map[string]string{podLabel: "", "app": "tf"}},
			Spec: corev1.PodSpec{NodeName: []string{"node1", "node2"}[i%2],
				Containers: []corev1.Container{{Name: "responder", Image: "kovs/responder"}}},
		}
		at := time.Now()
		if _, err := c.s.Client.CoreV1().Pods(ns).Create(context.Background(), pod, metav1.CreateOptions{}); err != nil {
			return created, fmt.Errorf("create pod %s/%s: %w", ns, pod.Name, err)
		}
		created[ns+"/"+pod.Name] = at
		<-tick.C
	}
	return created, nil
}

// createPolicy creates a policy over the namespace's pods and returns how long it took to
// be realized on both nodes (the first pods, one per node, come 100 ms after it).
func (c *cluster) createPolicy(tb testing.TB, ns string) time.Duration {
	tb.Helper()
	port := intstr.FromInt32(80)
	np := &networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "allow-tf"},
		Spec: networkingv1.NetworkPolicySpec{PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{"app": "tf"}},
			Ingress: []networkingv1.NetworkPolicyIngressRule{{
				From:  []networkingv1.NetworkPolicyPeer{{PodSelector: &metav1.LabelSelector{}}},
				Ports: []networkingv1.NetworkPolicyPort{{Port: &port}}}}}}
	start := time.Now()
	if _, err := c.s.Client.NetworkingV1().NetworkPolicies(ns).Create(context.Background(), np, metav1.CreateOptions{}); err != nil {
		tb.Fatal(err)
	}
	c.waitRealized(tb, ns, "")
	return time.Since(start)
}

// waitRealized waits until the namespace's policy is realized on both nodes.
func (c *cluster) waitRealized(tb testing.TB, ns, when string) {
	tb.Helper()
	framework.Eventually(tb, phaseTimeout, "the policy of "+ns+" realized on 2/2 nodes "+when, func() error {
		np, err := c.s.Client.NetworkingV1().NetworkPolicies(ns).Get(context.Background(), "allow-tf", metav1.GetOptions{})
		if err != nil {
			return err
		}
		value := np.Annotations[realization.AnnotationKey]
		st, err := realization.ParseStatus(value)
		if err != nil {
			return err
		}
		if st.Concerned != 2 || !st.Complete() {
			return fmt.Errorf("%s is %q", realization.AnnotationKey, value)
		}
		return nil
	})
}

// waitRunning waits until the namespace's n pods run with their addresses.
func (c *cluster) waitRunning(tb testing.TB, ns string, n int) {
	tb.Helper()
	framework.Eventually(tb, phaseTimeout, fmt.Sprintf("%d pods of %s running with addresses", n, ns), func() error {
		list, err := c.s.Client.CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{LabelSelector: podLabel})
		if err != nil {
			return err
		}
		running := 0
		for _, p := range list.Items {
			if p.Status.Phase == corev1.PodRunning && len(p.Status.PodIPs) > 0 {
				running++
			}
		}
		if running != n {
			return fmt.Errorf("%d of %d", running, n)
		}
		return nil
	})
}

// tokenReviews is the number of TokenReviews kube-apiserver has served.
func (c *cluster) tokenReviews(tb testing.TB) float64 {
	tb.Helper()
	n, err := c.s.APIServerMetric(context.Background(), "apiserver_request_total", map[string]string{"resource": "tokenreviews"})
	if err != nil {
		tb.Fatal(err)
	}
	return n
}
