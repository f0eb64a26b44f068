package sandbox

import (
	"os"
	"testing"
)

// TestFreePortsBelowTheEphemeralRange: the sandbox's listener ports are distinct and
// never ones the kernel may give an outgoing connection as its source port.
func TestFreePortsBelowTheEphemeralRange(t *testing.T) {
	first, n := portsBelowEphemeral()
	if first < 1024 || n <= 0 {
		t.Fatalf("range %d+%d", first, n)
	}
	taken := map[int]bool{}
	for range 50 {
		if _, err := freePort(taken); err != nil {
			t.Fatal(err)
		}
	}
	if len(taken) != 50 {
		t.Errorf("50 picks gave %d distinct ports", len(taken))
	}
	for p := range taken {
		if p < first || p >= first+n {
			t.Errorf("port %d outside %d-%d, below the ephemeral range", p, first, first+n-1)
		}
	}
}

// TestPlanAvoidsTheOtherSandboxesPorts: a sandbox's ports are picked apart from those in
// every other sandbox's saved state, bound yet or not. Sandbox "a" holds every other port
// of the range; each of ten plans of "b" must take only ports "a" does not hold (picked
// blind, all five of one plan would miss "a"'s half once in 32).
func TestPlanAvoidsTheOtherSandboxesPorts(t *testing.T) {
	root := t.TempDir()
	first, n := portsBelowEphemeral()
	a := Layout{Name: "a", Root: root}
	if err := os.MkdirAll(a.Dir(), 0o755); err != nil {
		t.Fatal(err)
	}
	held := &State{Name: "a"}
	for p := first; p < first+n; p += 2 {
		held.ReplicaMetricsPorts = append(held.ReplicaMetricsPorts, p)
	}
	if err := a.saveState(held); err != nil {
		t.Fatal(err)
	}
	b := Layout{Name: "b", Root: root}
	if err := os.MkdirAll(b.Dir(), 0o755); err != nil {
		t.Fatal(err)
	}
	u := &upRun{layout: b, opts: Options{Family: IPv4, Nodes: 1}}
	for range 10 {
		st, err := u.planAndSave()
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range st.loopbackPorts() {
			if (p-first)%2 == 0 {
				t.Fatalf("sandbox b took port %d, which sandbox a's state holds", p)
			}
		}
	}
}
