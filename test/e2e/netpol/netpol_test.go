// The NetworkPolicy truth-table suite: data-driven cases (cases/*.yaml) in the cluster
// model of the upstream Kubernetes NetworkPolicy e2e tests, run in a real sandbox with
// kovs; every ordered pod pair is probed on the case's ports from inside the pods, and the
// matrix is printed with the cells that differ. Needs root; runs under `make e2e`.
package netpol_test

import (
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/kovs-net/kovs/test/e2e/framework"
)

// realizeTimeout bounds how long a step may take to show its expected matrix: policy is
// enforced asynchronously, so the matrix is re-probed until it matches or this passes.
const realizeTimeout = 30 * time.Second

func TestNetworkPolicyTruthTable(t *testing.T) {
	runTruthTable(t, newModelCluster)
}

// runTruthTable runs every case, one sandbox per IP family, on the model cluster newCluster
// sets up (pods probed directly, or through Services).
func runTruthTable(t *testing.T, newCluster func(*testing.T, *framework.Sandbox, []ModelPod) *modelCluster) {
	env := framework.Require(t)
	cases, err := loadCases("cases")
	if err != nil {
		t.Fatal(err)
	}
	byFamily := map[string][]Case{}
	for _, c := range cases {
		f := c.Family
		if f == "" {
			f = "ipv4"
		}
		byFamily[f] = append(byFamily[f], c)
	}
	families := make([]string, 0, len(byFamily))
	for f := range byFamily {
		families = append(families, f)
	}
	sort.Strings(families)
	for _, family := range families {
		t.Run(family, func(t *testing.T) {
			s := framework.Up(t, env, "--nodes", "3", "--ip-family", family)
			m := newCluster(t, s, standardPods())
			for _, c := range byFamily[family] {
				t.Run(c.Name, func(t *testing.T) { m.runCase(t, c) })
			}
		})
	}
}

// runCase runs the steps of one case, then returns the cluster to the standard model.
func (m *modelCluster) runCase(t *testing.T, c Case) {
	defer m.reset(t, c)
	extra := m.addExtras(t, c)
	pods := append(append([]*corev1.Pod{}, m.pods...), extra...)
	for i, step := range c.Steps {
		m.applyStep(t, step)
		want := step.Expect.expected(keysOf(pods))
		var got matrix
		deadline := time.Now().Add(realizeTimeout)
		for {
			got = m.probe(t, pods, step.Expect.ports())
			if got.equal(want) || time.Now().After(deadline) {
				break
			}
			time.Sleep(500 * time.Millisecond)
		}
		if !got.equal(want) {
			t.Errorf("case %s step %d: reachability differs from the expectation (! marks the cells; A=allowed, D=denied as observed):\n%s",
				c.Name, i+1, got.render(want, keysOf(pods)))
		} else {
			t.Logf("step %d matches:\n%s", i+1, got.render(want, keysOf(pods)))
		}
	}
}

func keysOf(pods []*corev1.Pod) []string {
	var keys []string
	for _, p := range pods {
		keys = append(keys, p.Namespace+"/"+p.Name)
	}
	sort.Strings(keys)
	return keys
}

// matrix is observed reachability: port -> from -> to -> allowed.
type matrix map[string]map[string]map[string]bool

func (m matrix) equal(want map[string]map[string]map[string]bool) bool {
	for port, rows := range want {
		for from, cols := range rows {
			for to, allowed := range cols {
				if m[port][from][to] != allowed {
					return false
				}
			}
		}
	}
	return true
}

// render prints each port's matrix: "." allowed as expected, "X" denied as expected,
// "!A" allowed though expected denied, "!D" denied though expected allowed.
func (m matrix) render(want map[string]map[string]map[string]bool, keys []string) string {
	var b strings.Builder
	ports := make([]string, 0, len(want))
	for p := range want {
		ports = append(ports, p)
	}
	sort.Strings(ports)
	for _, port := range ports {
		fmt.Fprintf(&b, "%-8s", port)
		for _, to := range keys {
			fmt.Fprintf(&b, " %-4s", to)
		}
		b.WriteString("\n")
		for _, from := range keys {
			fmt.Fprintf(&b, "%-8s", from)
			for _, to := range keys {
				got, exp := m[port][from][to], want[port][from][to]
				cell := map[[2]bool]string{{true, true}: ".", {false, false}: "X", {true, false}: "!A", {false, true}: "!D"}[[2]bool{got, exp}]
				fmt.Fprintf(&b, " %-4s", cell)
			}
			b.WriteString("\n")
		}
	}
	return b.String()
}
