package netpol_test

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kovs-net/kovs/test/e2e/framework"
)

// migration is a make-before-break change across two nodes: restrict writes a policy
// that makes the restricting node deny x/a -> y/b, relax then removes the policy that
// made the relaxing node deny it. After each write, in that order, the connection is
// denied; it must never connect, whatever the order in which the nodes realize them.
type migration struct {
	name                  string
	start                 []*networkingv1.NetworkPolicy
	restrict              *networkingv1.NetworkPolicy
	relax                 *networkingv1.NetworkPolicy // deleted
	restricting, relaxing string
}

// denyEgressOfA isolates x/a for egress and allows it nothing (node1's share).
func denyEgressOfA() *networkingv1.NetworkPolicy {
	return &networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: "x", Name: "x-a-egress"},
		Spec: networkingv1.NetworkPolicySpec{PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{"app": "a"}},
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeEgress}}}
}

// onlyZIntoY lets y's pods receive only from namespace z (node2's share).
func onlyZIntoY() *networkingv1.NetworkPolicy {
	return &networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: "y", Name: "y-only-z"},
		Spec: networkingv1.NetworkPolicySpec{PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress},
			Ingress: []networkingv1.NetworkPolicyIngressRule{{From: []networkingv1.NetworkPolicyPeer{{NamespaceSelector: &metav1.LabelSelector{
				MatchLabels: map[string]string{"kubernetes.io/metadata.name": "z"}}}}}}}}
}

// TestMigrationsAcrossNodesNeverOpen is the stress test of the transition gate (the
// failure of case 61 step 3 made reliable): the agent of the node that restricts is
// stopped (SIGSTOP) while both writes are made, so that it realizes the restriction last,
// and x/a -> y/b is probed all the while. Before the gate, the relaxing node dropped its
// isolation at once and the probes connected; with it, the relaxing node gets nothing
// until the restricting node reports its share realized. Positive evidence that the
// relaxation was held, not merely slow: the relaxing node's agent received no new
// generation while the other was stopped, and received it after. A positive control
// (z/c -> y/b, allowed throughout) shows the prober reaches y/b.
//
// KOVS_MIGRATION_ROUNDS repeats the migrations (default 2; the closing note's runs used
// 50 with -count).
func TestMigrationsAcrossNodesNeverOpen(t *testing.T) {
	env := framework.Require(t)
	s := framework.Up(t, env, "--nodes", "3")
	rounds := 2
	if v := os.Getenv("KOVS_MIGRATION_ROUNDS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			t.Fatalf("KOVS_MIGRATION_ROUNDS=%q: want a positive number", v)
		}
		rounds = n
	}
	for _, ns := range []string{"x", "y", "z"} {
		s.EnsureNamespace(t, ns, nil)
	}
	s.CreatePod(t, framework.PodSpec{Namespace: "x", Name: "a", Node: "node1", Labels: map[string]string{"app": "a"}})
	s.CreatePod(t, framework.PodSpec{Namespace: "y", Name: "b", Node: "node2", Labels: map[string]string{"app": "b"}})
	s.CreatePod(t, framework.PodSpec{Namespace: "z", Name: "c", Node: "node3", Labels: map[string]string{"app": "c"}})
	a := s.WaitRunning(t, "x", "a", 60*time.Second)
	b := s.WaitRunning(t, "y", "b", 60*time.Second)
	c := s.WaitRunning(t, "z", "c", 60*time.Second)
	bIP := framework.PodIPs(b)[0]

	migrations := []migration{
		{name: "egress deny on node1, then node2's ingress isolation deleted",
			start: []*networkingv1.NetworkPolicy{onlyZIntoY()}, restrict: denyEgressOfA(), relax: onlyZIntoY(),
			restricting: "node1", relaxing: "node2"},
		{name: "ingress isolation on node2, then node1's egress deny deleted",
			start: []*networkingv1.NetworkPolicy{denyEgressOfA()}, restrict: onlyZIntoY(), relax: denyEgressOfA(),
			restricting: "node2", relaxing: "node1"},
	}
	var probes, connected int
	for round := 1; round <= rounds; round++ {
		for _, mg := range migrations {
			p, n := runMigration(t, s, mg, a, c, bIP)
			probes += p
			connected += n
			if t.Failed() {
				return
			}
		}
	}
	t.Logf("%d rounds of %d migrations: %d probes of x/a -> y/b while the restricting agent was stopped, %d connected",
		rounds, len(migrations), probes, connected)
}

// runMigration runs one migration and returns the probes of x/a -> y/b made and how many
// connected (any is a failure, reported here).
func runMigration(t *testing.T, s *framework.Sandbox, mg migration, a, c *corev1.Pod, bIP netip.Addr) (probes, connected int) {
	t.Helper()
	ctx := context.Background()
	for _, np := range mg.start {
		createPolicy(t, s, np)
	}
	defer func() {
		for _, np := range []*networkingv1.NetworkPolicy{mg.restrict, mg.relax} {
			_ = s.Client.NetworkingV1().NetworkPolicies(np.Namespace).Delete(ctx, np.Name, metav1.DeleteOptions{})
		}
	}()
	// The start state in force: x/a -> y/b denied, z/c -> y/b allowed.
	framework.Eventually(t, 30*time.Second, mg.name+": the start state in force", func() error {
		if r := s.Probe(a, bIP, "80/tcp", cellBudget); r.Connected {
			return fmt.Errorf("x/a -> y/b connects before the migration")
		}
		if r := s.Probe(c, bIP, "80/tcp", cellBudget); !r.Connected {
			return fmt.Errorf("z/c -> y/b: %s", framework.Describe(r))
		}
		return nil
	})
	waitCaughtUp(t, s, mg.relaxing)
	waitCaughtUp(t, s, mg.restricting)
	before, err := s.AgentPolicyStatus(mg.relaxing)
	if err != nil {
		t.Fatal(err)
	}

	resume := s.Pause(t, mg.restricting+"-kovs-agent")
	createPolicy(t, s, mg.restrict)
	if err := s.Client.NetworkingV1().NetworkPolicies(mg.relax.Namespace).Delete(ctx, mg.relax.Name, metav1.DeleteOptions{}); err != nil {
		resume()
		t.Fatalf("%s: delete %s/%s: %v", mg.name, mg.relax.Namespace, mg.relax.Name, err)
	}
	probes, connected, controls := hammerWhile(s, a, c, bIP, 3*time.Second)
	held, err := s.AgentPolicyStatus(mg.relaxing)
	resume()
	if err != nil {
		t.Fatal(err)
	}
	if controls == 0 {
		t.Fatalf("%s: z/c never reached y/b while the agent was stopped: the prober would not see a window either", mg.name)
	}
	if connected > 0 {
		t.Errorf("%s: %d of %d probes of x/a -> y/b connected while %s had not realized the restriction: the relaxation on %s opened a window",
			mg.name, connected, probes, mg.restricting, mg.relaxing)
	}
	if held.ReceivedGeneration != before.ReceivedGeneration {
		t.Errorf("%s: %s received generation %d (had %d) before %s realized its restriction: the relaxation was not held",
			mg.name, mg.relaxing, held.ReceivedGeneration, before.ReceivedGeneration, mg.restricting)
	}
	// Once the restricting agent runs again, the relaxation comes.
	framework.Eventually(t, 30*time.Second, mg.name+": the relaxation reaches "+mg.relaxing, func() error {
		st, err := s.AgentPolicyStatus(mg.relaxing)
		if err != nil {
			return err
		}
		if st.ReceivedGeneration == before.ReceivedGeneration || st.RealizedGeneration != st.ReceivedGeneration {
			return fmt.Errorf("%s received %d, realized %d (had %d)", mg.relaxing, st.ReceivedGeneration, st.RealizedGeneration, before.ReceivedGeneration)
		}
		return nil
	})
	// And the restriction is in force where it was written.
	framework.Eventually(t, 30*time.Second, mg.name+": "+mg.restrict.Name+" realized", func() error {
		np, err := s.Client.NetworkingV1().NetworkPolicies(mg.restrict.Namespace).Get(ctx, mg.restrict.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		var realized, concerned int
		st := np.Annotations["kovs.io/realization"]
		if _, err := fmt.Sscanf(st, "%d/%d nodes", &realized, &concerned); err != nil || concerned == 0 || realized != concerned {
			return fmt.Errorf("kovs.io/realization is %q", st)
		}
		return nil
	})
	if r := s.Probe(a, bIP, "80/tcp", cellBudget); r.Connected {
		t.Errorf("%s: x/a -> y/b connects after the migration", mg.name)
	}
	return probes, connected
}

// waitCaughtUp waits until node's agent has realized every generation it received.
func waitCaughtUp(t *testing.T, s *framework.Sandbox, node string) {
	t.Helper()
	framework.Eventually(t, 30*time.Second, node+"'s agent realized what it received", func() error {
		st, err := s.AgentPolicyStatus(node)
		if err != nil {
			return err
		}
		if st.RealizedGeneration != st.ReceivedGeneration {
			return fmt.Errorf("received %d, realized %d", st.ReceivedGeneration, st.RealizedGeneration)
		}
		return nil
	})
}

func createPolicy(t *testing.T, s *framework.Sandbox, np *networkingv1.NetworkPolicy) {
	t.Helper()
	if _, err := s.Client.NetworkingV1().NetworkPolicies(np.Namespace).Create(context.Background(), np, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create policy %s/%s: %v", np.Namespace, np.Name, err)
	}
}

// hammerAttackers is how many workers probe x/a -> y/b at once: each probe of a dropped
// connection lasts cellBudget, so this many keep about a dozen probes a second going.
const hammerAttackers = 24

// hammerWhile probes x/a -> y/b from hammerAttackers workers and z/c -> y/b from one for d.
func hammerWhile(s *framework.Sandbox, a, c *corev1.Pod, bIP netip.Addr, d time.Duration) (probes, connected, controls int) {
	var mu sync.Mutex
	var wg sync.WaitGroup
	end := time.Now().Add(d)
	for i := range 1 + hammerAttackers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(end) {
				from := a
				if i == 0 {
					from = c
				}
				r := s.Probe(from, bIP, "80/tcp", cellBudget)
				mu.Lock()
				switch {
				case i == 0 && r.Connected:
					controls++
				case i > 0:
					probes++
					if r.Connected {
						connected++
					}
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return probes, connected, controls
}
