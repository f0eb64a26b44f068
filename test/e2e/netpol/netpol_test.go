// The NetworkPolicy truth-table suite: data-driven cases (cases/*.yaml) in the cluster
// model of the upstream Kubernetes NetworkPolicy e2e tests, run in a real sandbox with
// kovs; every ordered pod pair is probed on the case's ports from inside the pods, and the
// matrix is printed with the cells that differ. Needs root; runs under `make e2e`.
//
// Each step is judged only once kovs says it is enforced, and then more than once:
//
//  1. While the step's writes are made and realized, the cells that are denied before,
//     after and in every state in between (as the independent model, package
//     policymodel, says) are probed continuously: none may ever connect.
//  2. The step waits until kovs reports it realized: a barrier policy created after the
//     step's writes reaches all nodes (its realization means every change the controller
//     compiled before it is installed everywhere), and every policy of the case's
//     namespaces has a complete kovs.io/realization annotation.
//  3. Three rounds of probes must each match the expectation: two at once (at the same
//     time, from different source ports), and one after every node's agent has finished
//     two more full flow resyncs (so at least one started after realization); the sandbox
//     runs the agents with a short resync period for it.
//
// A cell is denied only when its probe got no answer within cellBudget, which covers a
// retransmission of every handshake packet; allowed cells get the same budget and no
// second try. The probes that connected only after the first retransmission time are
// counted per sandbox and printed at its end; more than one in a hundred (more than one,
// in a run of fewer) fails the run (probe_test.go). A probe that is neither connected to the pod it was sent to nor
// silently dropped (refused, answered by another pod, failed) is an error, never a deny.
package netpol_test

import (
	"fmt"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/kovs-net/kovs/test/e2e/framework"
)

// resyncPeriod is the agents' full-resync period in the truth-table sandboxes.
const resyncPeriod = time.Second

func TestNetworkPolicyTruthTable(t *testing.T) {
	runTruthTable(t, newModelCluster, everyCase, "ipv4", "ipv6", "dual")
}

// everyCase keeps every case.
func everyCase(Case) bool { return true }

// runTruthTable runs the cases run keeps, one sandbox per IP family, on the model cluster
// newCluster sets up (pods probed directly, or through Services). A case runs in the
// sandbox of its family and, with dualStack, in the dual-stack one too.
func runTruthTable(t *testing.T, newCluster func(*testing.T, *framework.Sandbox, string, []ModelPod) *modelCluster, run func(Case) bool, families ...string) {
	env := framework.Require(t)
	cases, err := loadCases("cases")
	if err != nil {
		t.Fatal(err)
	}
	byFamily := map[string][]Case{}
	for _, c := range cases {
		if !run(c) {
			continue
		}
		for _, f := range sandboxFamilies(c) {
			byFamily[f] = append(byFamily[f], c)
		}
	}
	for _, family := range families {
		t.Run(family, func(t *testing.T) {
			start := time.Now()
			s := framework.Up(t, env, "--nodes", "3", "--ip-family", family, "--agent-resync-period", resyncPeriod.String())
			m := newCluster(t, s, family, standardPods())
			for i, c := range byFamily[family] {
				if !t.Run(c.Name, func(t *testing.T) { m.runCase(t, c) }) && m.broken != "" {
					t.Fatalf("stopped: %s; cases not run: %s", m.broken, caseNames(byFamily[family][i+1:]))
				}
			}
			t.Logf("%d cases in %s", len(byFamily[family]), time.Since(start).Round(time.Second))
			m.slow.check(t)
		})
	}
}

func caseNames(cases []Case) string {
	var names []string
	for _, c := range cases {
		names = append(names, c.Name)
	}
	return strings.Join(names, ", ")
}

// runCase runs the steps of one case, then returns the cluster to the standard model and
// checks it did. A step that fails ends the case (the later steps build on it).
func (m *modelCluster) runCase(t *testing.T, c Case) {
	defer m.reset(t, c)
	extra := m.addExtras(t, c)
	pods := append(append([]*corev1.Pod{}, m.pods...), extra...)
	for i, step := range c.Steps {
		if !m.runStep(t, fmt.Sprintf("case %s step %d", c.Name, i+1), step, pods) {
			return
		}
	}
}

// runStep makes a step's writes and judges the result; it reports whether it passed.
func (m *modelCluster) runStep(t *testing.T, what string, step Step, pods []*corev1.Pod) bool {
	t.Helper()
	start := time.Now()
	targets, byKey := m.targets(pods)
	keys := keysOf(pods)
	cells := cellsOf(step.Expect.ports(), m.families, targets)
	want := step.Expect.expected(cells)
	writes, err := stepWrites(step, m.podAddresses)
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	watched := m.alwaysDenied(t, what, writes, cells, want)
	watch := m.watchDenied(watched, byKey)
	for _, w := range writes {
		m.perform(t, w)
	}
	m.waitRealized(t, what)
	realized := time.Since(start)
	resyncs := m.fullResyncs(t)
	ok := true
	var took []string
	// Rounds 1 and 2 probe at the same time (each cell from two source ports): a round
	// lasts cellBudget, which every denied cell waits out.
	roundStart := time.Now()
	var first [2]observed
	var wg sync.WaitGroup
	for i := range first {
		wg.Add(1)
		go func() {
			defer wg.Done()
			first[i] = m.probe(t, cells, byKey)
		}()
	}
	wg.Wait()
	took = append(took, "rounds 1 and 2 "+time.Since(roundStart).Round(time.Millisecond).String())
	for round := 1; round <= 3 && ok; round++ {
		when := "right after realization"
		var got observed
		if round < 3 {
			got = first[round-1]
		} else {
			waitStart := time.Now()
			m.waitFullResyncs(t, resyncs, 2)
			took = append(took, "resyncs "+time.Since(waitStart).Round(time.Millisecond).String())
			when = "after two more full flow resyncs on every node"
			roundStart = time.Now()
			got = m.probe(t, cells, byKey)
			took = append(took, "round 3 "+time.Since(roundStart).Round(time.Millisecond).String())
		}
		if bad := got.mismatches(want); len(bad) > 0 {
			t.Errorf("%s: round %d of 3 (%s) differs from the expectation in %d cells (! marks them; A=allowed, D=denied as observed, E=error):\n%s",
				what, round, when, len(bad), got.render(want, keys))
			ok = false
		} else if round == 3 {
			t.Logf("%s matches (realized after %s, checked 3 times, the last after a full resync; %s):\n%s",
				what, realized.Round(time.Millisecond), strings.Join(took, ", "), got.render(want, keys))
		}
	}
	probes, bad, violations := watch.finish()
	if bad > 0 {
		t.Errorf("%s: %d of %d probes of the %d cells denied before, during and after the step were not dropped (the first %d):\n  %s",
			what, bad, probes, len(watched), len(violations), strings.Join(violations, "\n  "))
		ok = false
	} else if len(watched) > 0 {
		t.Logf("%s: %d probes of %d cells denied throughout, none connected", what, probes, len(watched))
	}
	return ok
}

func keysOf(pods []*corev1.Pod) []string {
	var keys []string
	for _, p := range pods {
		keys = append(keys, key(p))
	}
	sort.Strings(keys)
	return keys
}
