package harness

import (
	"regexp"
	"strings"
	"testing"
	"time"
)

// TestMarkdownOfAFailedRun renders the report of a run that failed in the workload phase,
// as the 5,000-node attempts did: the phases after it have no times, and the report must
// say so rather than print the differences of zero times.
func TestMarkdownOfAFailedRun(t *testing.T) {
	start := time.Date(2026, 12, 2, 17, 0, 0, 0, time.UTC)
	cfg := Config{Nodes: 5000, PodsPerNode: 10, Namespaces: 5000, PoliciesPerNS: 2}
	at := func(d time.Duration) time.Time { return start.Add(d) }
	r := &Result{
		Config:          cfg,
		Failure:         "phase workload: pods: Timeout: request did not complete within requested timeout",
		NodeBlocks:      125 * time.Second,
		AgentsConnected: 287 * time.Second,
		WorkloadStart:   at(500 * time.Second),
		WorkloadObjects: 31234,
		Phases: []PhaseUsage{
			{Name: "nodes", Start: at(0), End: at(201 * time.Second)},
			{Name: "agents", Start: at(201 * time.Second), End: at(488 * time.Second)},
			{Name: "workload", Start: at(488 * time.Second), End: at(1249 * time.Second)},
		},
		Processes: []ProcessUsage{{Name: "kovs-controller", CPUSeconds: 300, PeakRSS: 900 << 20}},
	}
	var b strings.Builder
	r.Markdown(&b, "kovs at scale")
	out := b.String()
	negative := regexp.MustCompile(`(^|[ (*])-[0-9]`)
	for _, line := range strings.Split(out, "\n") {
		if !strings.HasPrefix(line, "| ") {
			continue
		}
		if strings.Contains(line, "NaN") || strings.Contains(line, "Inf") || negative.MatchString(line) {
			t.Errorf("report row with a value computed from times never taken: %s", line)
		}
	}
	for _, want := range []string{
		"**This run did not complete**: phase workload: pods: Timeout",
		"| nodes registered to every node's block allocated | 125.0 s |",
		"| agents: tokens minted, connected, first snapshot on all | 287.0 s |",
		"| workload written (namespaces, pods, policies) | not completed: 31234 of 65000 objects created |",
		"not completed (phase first convergence)",
		"not completed (phase churn)",
		"not completed (phase final convergence)",
		"| **kovs-controller peak RSS** (VmHWM) | **900 MiB** |",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("report lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "## Traffic per agent per change against its span") {
		t.Errorf("report has the span section of a phase never run:\n%s", out)
	}
}

// TestMarkdownSaysWhatIsSimulated: the report lists the method's choices as the run made
// them (Lease renewals off or at their interval, the controllers run) and leaves a process
// that did not run (kube-scheduler in the scale mode) out of the CPU table.
func TestMarkdownSaysWhatIsSimulated(t *testing.T) {
	start := time.Date(2026, 12, 5, 21, 0, 0, 0, time.UTC)
	r := &Result{Config: TestSize(), WorkloadStart: start,
		Phases:    []PhaseUsage{{Name: "nodes", Start: start, End: start.Add(time.Minute), CPUSeconds: map[string]float64{"kube-apiserver": 6}}},
		Processes: []ProcessUsage{{Name: "kube-apiserver"}, {Name: "kube-controller-manager"}, {Name: harnessProcess}}}
	render := func() string {
		var b strings.Builder
		r.Markdown(&b, "kovs at scale")
		return b.String()
	}
	out := render()
	for _, want := range []string{"## What is simulated, and what is not", "**No Lease renewals**",
		"**kube-controller-manager runs only `serviceaccount-controller`**", "**No kube-scheduler**",
		"| phase | wall | kube-apiserver | kube-controller-manager | " + harnessProcess + " |"} {
		if !strings.Contains(out, want) {
			t.Errorf("report lacks %q:\n%s", want, out)
		}
	}
	r.Config.LeaseRenewInterval = 10 * time.Second
	if out := render(); !strings.Contains(out, "**Node Leases renewed every 10s** by every hollow kubelet") || strings.Contains(out, "No Lease renewals") {
		t.Errorf("a run that renewed Leases is reported as one that did not:\n%s", out)
	}
}
