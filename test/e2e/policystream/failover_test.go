package policystream_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/kovs-net/kovs/go-controller/pkg/controller"
	"github.com/kovs-net/kovs/go-controller/pkg/controller/networkpolicy"
	"github.com/kovs-net/kovs/go-controller/pkg/policy"
	"github.com/kovs-net/kovs/go-controller/pkg/sandbox"
	"github.com/kovs-net/kovs/test/e2e/framework"
)

// Churn during the failover: a pod every 1.2 s (50 a minute), one of the older ones
// deleted every third pod, and a NetworkPolicy created, changed or deleted every 2 s.
const (
	failoverNS        = "failover"
	churnPodEvery     = 1200 * time.Millisecond
	churnPolicyEvery  = 2 * time.Second
	churnBeforeKill   = 5 * time.Second
	churnAfterLeading = 5 * time.Second
	// leadBound is the Lease timing a standby must take over within, counted from the
	// leader's death. The standby counts the lease duration from when it last saw the
	// Lease renewed, and it looks every retry period jittered by client-go's factor 1.2
	// (2 s to 4.4 s): it saw the last renewal at most one such period before the kill,
	// and tries to take the expired Lease at most one period after the expiry.
	// On top of that, the standby's read and update of the Lease are kube-apiserver
	// requests, which take seconds while make test runs two sandboxes on two cores:
	// apiAllowance covers them, so a loaded machine does not fail the test; a standby
	// that does not take the expired Lease still does.
	leadBound    = controller.DefaultLeaseDuration + 2*(controller.DefaultRetryPeriod*22/10) + apiAllowance
	apiAllowance = 10 * time.Second
)

// checkFailover is issue #27's controller failover under churn: two kovs-controller
// replicas, the leader killed (SIGKILL by its pid) while pods are created and policies
// change. The standby must lead within the Lease timing; until it does, no agent's
// realized policy changes (agents keep the last state); then every agent reconnects and
// converges to exactly a from-scratch compile of the final objects (networkpolicy.Compile
// of what kube-apiserver lists): a stand-in following each node's stream holds that
// share, and the node's real agent has realized that very generation. Reported: time to
// lead and time to converge.
func (c *cluster) checkFailover(t *testing.T) {
	st, err := c.s.Layout.LoadState()
	if err != nil {
		t.Fatal(err)
	}
	replicas := sandbox.ControllerReplicas(*st)
	if len(replicas) < 2 {
		t.Fatalf("%d kovs-controller replica: up needs --controller-replicas 2", len(replicas))
	}
	var leader, standby sandbox.ControllerReplica
	framework.Eventually(t, 30*time.Second, "exactly one kovs-controller replica leading", func() error {
		var leading []sandbox.ControllerReplica
		var others []sandbox.ControllerReplica
		for _, r := range replicas {
			l, err := isLeading(r)
			if err != nil {
				return err
			}
			if l {
				leading = append(leading, r)
			} else {
				others = append(others, r)
			}
		}
		if len(leading) != 1 {
			return fmt.Errorf("%d replicas lead", len(leading))
		}
		leader, standby = leading[0], others[0]
		return nil
	})
	nodes := []string{"node1", "node2"}
	standIns := map[string]*sink{}
	for _, n := range nodes {
		standIns[n] = newSink()
		c.follow(t, n, c.s.AgentToken(t, n), standIns[n])
	}
	c.s.EnsureNamespace(t, failoverNS, map[string]string{"purpose": "failover"})

	ch := startChurn(c.s, nodes)
	defer ch.stop()
	framework.Eventually(t, 2*churnBeforeKill, "churn under way before the kill", func() error {
		if pods, changes := ch.counts(); pods < 4 || changes < 2 {
			return fmt.Errorf("%d pods created, %d policy changes so far", pods, changes)
		}
		return ch.failed()
	})
	realizedBefore := map[string]uint64{}
	for _, n := range nodes {
		p, err := c.s.AgentPolicyStatus(n)
		if err != nil {
			t.Fatal(err)
		}
		realizedBefore[n] = p.RealizedGeneration
	}
	pid := c.s.Layout.PID(leader.Process)
	killed := time.Now()
	if err := c.s.Layout.Kill(leader.Process); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if _, err := c.s.Layout.Start(leader.Process); err != nil {
			t.Errorf("start %s again: %v", leader.Process, err)
		}
	})
	// What each agent holds once it has realized all it received from the dead leader.
	kept := map[string]framework.AgentPolicy{}
	for _, n := range nodes {
		framework.Eventually(t, 10*time.Second, n+"'s agent to realize what it received before the kill", func() error {
			p, err := c.s.AgentPolicyStatus(n)
			if err != nil {
				return err
			}
			if !p.Received || p.RealizedGeneration != p.ReceivedGeneration {
				return fmt.Errorf("received %v, generation %d, realized %d", p.Received, p.ReceivedGeneration, p.RealizedGeneration)
			}
			kept[n] = p
			return nil
		})
		// The leader's generations only grow: one below what the agent realized before
		// the kill is a policy dropped with the stream.
		if kept[n].RealizedGeneration < realizedBefore[n] {
			t.Errorf("%s's agent went from generation %d before the kill to %d (%d rules) when the stream broke: it must keep the last policy",
				n, realizedBefore[n], kept[n].RealizedGeneration, kept[n].Rules)
		}
	}

	// No replica leads until the standby takes the Lease: every agent keeps what it
	// realized (it may have received nothing newer, and must not drop what it has).
	var toLead time.Duration
	for {
		l, err := isLeading(standby)
		if err != nil {
			t.Fatal(err)
		}
		if l {
			toLead = time.Since(killed)
			break
		}
		for _, n := range nodes {
			p, err := c.s.AgentPolicyStatus(n)
			if err != nil {
				t.Fatal(err)
			}
			if !p.Received || p.RealizedGeneration != kept[n].RealizedGeneration || p.Rules != kept[n].Rules {
				t.Errorf("%s's agent with no leader: realized generation %d with %d rules, had %d with %d at the kill",
					n, p.RealizedGeneration, p.Rules, kept[n].RealizedGeneration, kept[n].Rules)
			}
		}
		if time.Since(killed) > leadBound {
			t.Fatalf("%s still not leading %s after %s (pid %d) was killed: beyond the Lease timing (%s lease, %s retry, %s for kube-apiserver's answers)",
				standby.Process, leadBound, leader.Process, pid, controller.DefaultLeaseDuration, controller.DefaultRetryPeriod, apiAllowance)
		}
		time.Sleep(100 * time.Millisecond)
	}
	// How long the churn goes on under the new leader is the test's input, not a wait
	// for a signal.
	time.Sleep(time.Until(killed.Add(toLead + churnAfterLeading)))
	pods, changes, last, err := ch.stop()
	if err != nil {
		t.Fatalf("churn: %v", err)
	}

	var report string
	framework.Eventually(t, 90*time.Second, "every agent's share to be a from-scratch compile of the final objects", func() error {
		running, err := c.churnRunning()
		if err != nil {
			return err
		}
		if running != pods-pods/3 {
			return fmt.Errorf("%d churn pods running with addresses, want %d", running, pods-pods/3)
		}
		report, err = c.agentsMatchScratch(nodes, standIns)
		return err
	})
	converged := time.Now()
	t.Logf("%s killed (pid %d) under churn (%d pods created, %d deleted, %d policy changes): %s led %s later; every agent a from-scratch compile %s after the kill, %s after the last change (%s)",
		leader.Process, pid, pods, pods/3, changes, standby.Process, toLead.Round(time.Millisecond),
		converged.Sub(killed).Round(time.Millisecond), converged.Sub(last).Round(time.Millisecond), report)
}

// isLeading reads kovs_controller_leader from the replica's /metrics.
func isLeading(r sandbox.ControllerReplica) (bool, error) {
	url := "http://" + net.JoinHostPort("127.0.0.1", strconv.Itoa(r.MetricsPort)) + "/metrics"
	resp, err := (&http.Client{Timeout: 2 * time.Second}).Get(url)
	if err != nil {
		return false, fmt.Errorf("%s: %w", r.Process, err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "kovs_controller_leader "); ok {
			return strings.TrimSpace(v) == "1", nil
		}
	}
	return false, fmt.Errorf("%s: no kovs_controller_leader in %s", r.Process, url)
}

// agentsMatchScratch compares, for every node, the share a stand-in follows from the
// leader's stream with a from-scratch compile of what kube-apiserver lists now, and checks
// that the node's real agent has received and realized that very generation. It returns
// what it compared, or how they differ.
func (c *cluster) agentsMatchScratch(nodes []string, standIns map[string]*sink) (string, error) {
	scratch, err := c.compileFresh()
	if err != nil {
		return "", err
	}
	var parts []string
	for _, n := range nodes {
		want, ok := scratch[n]
		if !ok {
			want = policy.NewNodeShare(n)
		}
		got, have := standIns[n].get()
		if !have || !bytes.Equal(framework.ShareJSON(got), framework.ShareJSON(want)) {
			return "", fmt.Errorf("%s's share (from the leader's stream) differs from a from-scratch compile:\n  stream  %s\n  scratch %s",
				n, framework.Clip(framework.ShareJSON(got)), framework.Clip(framework.ShareJSON(want)))
		}
		p, err := c.s.AgentPolicyStatus(n)
		if err != nil {
			return "", err
		}
		if p.ReceivedGeneration != got.Generation || p.RealizedGeneration != got.Generation {
			return "", fmt.Errorf("%s's agent received generation %d, realized %d; the share's is %d", n, p.ReceivedGeneration, p.RealizedGeneration, got.Generation)
		}
		parts = append(parts, fmt.Sprintf("%s: %d rules, generation %d", n, len(want.Rules), got.Generation))
	}
	return strings.Join(parts, "; "), nil
}

// compileFresh lists the namespaces, pods and NetworkPolicies from kube-apiserver and
// compiles every node's share from scratch with the controller's reference compiler.
func (c *cluster) compileFresh() (map[string]policy.NodeShare, error) {
	ctx := context.Background()
	nsl, err := c.s.Client.CoreV1().Namespaces().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	pl, err := c.s.Client.CoreV1().Pods("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	npl, err := c.s.Client.NetworkingV1().NetworkPolicies("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	var namespaces []*corev1.Namespace
	var pods []*corev1.Pod
	var nps []*networkingv1.NetworkPolicy
	for i := range nsl.Items {
		namespaces = append(namespaces, &nsl.Items[i])
	}
	for i := range pl.Items {
		pods = append(pods, &pl.Items[i])
	}
	for i := range npl.Items {
		nps = append(nps, &npl.Items[i])
	}
	return networkpolicy.Compile(namespaces, pods, nps), nil
}

// churnRunning counts the churn's pods that run with their addresses.
func (c *cluster) churnRunning() (int, error) {
	pl, err := c.s.Client.CoreV1().Pods(failoverNS).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		return 0, err
	}
	running := 0
	for _, p := range pl.Items {
		if p.Status.Phase == corev1.PodRunning && len(p.Status.PodIPs) > 0 && p.DeletionTimestamp == nil {
			running++
		}
	}
	return running, nil
}

// get returns the share the sink holds.
func (s *sink) get() (policy.NodeShare, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.share, s.have
}

// churn creates and deletes pods and changes NetworkPolicies in failoverNS until stopped.
type churn struct {
	s     *framework.Sandbox
	nodes []string
	quit  chan struct{}
	done  chan struct{}
	once  sync.Once

	mu            sync.Mutex
	pods, changes int
	last          time.Time
	err           error
}

func startChurn(s *framework.Sandbox, nodes []string) *churn {
	ch := &churn{s: s, nodes: nodes, quit: make(chan struct{}), done: make(chan struct{})}
	go ch.run()
	return ch
}

func (ch *churn) run() {
	defer close(ch.done)
	podTick, policyTick := time.NewTicker(churnPodEvery), time.NewTicker(churnPolicyEvery)
	defer podTick.Stop()
	defer policyTick.Stop()
	var err error
	for err == nil {
		select {
		case <-ch.quit:
			return
		case <-podTick.C:
			err = ch.pod()
		case <-policyTick.C:
			err = ch.policy()
		}
	}
	ch.mu.Lock()
	ch.err = err
	ch.mu.Unlock()
}

// pod creates the next pod (on the nodes in turn, role a or b in turn) and, every third
// one, deletes the oldest pod still there.
func (ch *churn) pod() error {
	ctx := context.Background()
	ch.mu.Lock()
	i := ch.pods
	ch.mu.Unlock()
	role := []string{"a", "b"}[i%2]
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: failoverNS, Name: fmt.Sprintf("p%d", i), Labels: map[string]string{"role": role}},
		Spec: corev1.PodSpec{NodeName: ch.nodes[(i/2)%len(ch.nodes)],
			Containers: []corev1.Container{{Name: "responder", Image: "kovs/responder"}}},
	}
	if _, err := ch.s.Client.CoreV1().Pods(failoverNS).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("create pod %s: %w", pod.Name, err)
	}
	if i%3 == 2 {
		victim := fmt.Sprintf("p%d", i/3*2) // p0, p2, p4, ...: always an older pod
		zero := int64(0)
		if err := ch.s.Client.CoreV1().Pods(failoverNS).Delete(ctx, victim, metav1.DeleteOptions{GracePeriodSeconds: &zero}); err != nil {
			return fmt.Errorf("delete pod %s: %w", victim, err)
		}
	}
	ch.mu.Lock()
	ch.pods++
	ch.last = time.Now()
	ch.mu.Unlock()
	return nil
}

// policy applies change number i: three policies in turn, each created or changed
// (peers and port vary with i) twice, then deleted twice over (a no-op the second time).
func (ch *churn) policy() error {
	ctx := context.Background()
	ch.mu.Lock()
	i := ch.changes
	ch.mu.Unlock()
	api := ch.s.Client.NetworkingV1().NetworkPolicies(failoverNS)
	name := fmt.Sprintf("np%d", i%3)
	if (i/6)%2 == 1 {
		if err := api.Delete(ctx, name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("delete NetworkPolicy %s: %w", name, err)
		}
	} else {
		port := intstr.FromInt32(int32(80 + i%7))
		self, peer := []string{"a", "b"}[i%2], []string{"b", "a"}[i%2]
		spec := networkingv1.NetworkPolicySpec{
			PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{"role": self}},
			Ingress: []networkingv1.NetworkPolicyIngressRule{{
				From:  []networkingv1.NetworkPolicyPeer{{PodSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"role": peer}}}},
				Ports: []networkingv1.NetworkPolicyPort{{Port: &port}}}},
		}
		if i%3 == 1 {
			spec.PolicyTypes = []networkingv1.PolicyType{networkingv1.PolicyTypeIngress, networkingv1.PolicyTypeEgress}
			spec.Egress = []networkingv1.NetworkPolicyEgressRule{{To: []networkingv1.NetworkPolicyPeer{{PodSelector: &metav1.LabelSelector{}}}}}
		}
		np, err := api.Get(ctx, name, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			_, err = api.Create(ctx, &networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: failoverNS, Name: name}, Spec: spec}, metav1.CreateOptions{})
		case err == nil:
			np.Spec = spec
			_, err = api.Update(ctx, np, metav1.UpdateOptions{})
		}
		if err != nil {
			return fmt.Errorf("apply NetworkPolicy %s: %w", name, err)
		}
	}
	ch.mu.Lock()
	ch.changes++
	ch.last = time.Now()
	ch.mu.Unlock()
	return nil
}

func (ch *churn) counts() (int, int) {
	ch.mu.Lock()
	defer ch.mu.Unlock()
	return ch.pods, ch.changes
}

func (ch *churn) failed() error {
	ch.mu.Lock()
	defer ch.mu.Unlock()
	return ch.err
}

// stop ends the churn and returns what it did: pods created, policy changes, the time
// of the last change, and its error.
func (ch *churn) stop() (int, int, time.Time, error) {
	ch.once.Do(func() { close(ch.quit) })
	<-ch.done
	ch.mu.Lock()
	defer ch.mu.Unlock()
	return ch.pods, ch.changes, ch.last, ch.err
}
