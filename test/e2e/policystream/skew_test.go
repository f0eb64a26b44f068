package policystream_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/kovs-net/kovs/test/e2e/framework"
)

// oldReleaseEnv names a checkout of the previous release with `make build` done (make e2e
// sets it to the release at UPGRADE_FROM, built into the cache by make old-release).
const oldReleaseEnv = "KOVS_OLD_RELEASE_DIR"

// checkOlderAgent is the version skew docs/upgrades.md supports (agents older than the
// controller, as during every upgrade between the controller's rollout and the agents'):
// node2's kovs-agent is replaced by the previous release's binary on the same node state
// and takes its first snapshot, then NetworkPolicies change (deltas). The old agent must take this controller's snapshot and
// deltas and realize exactly what a from-scratch compile of the objects gives its node,
// as node1's current agent does.
func (c *cluster) checkOlderAgent(t *testing.T) {
	oldDir := os.Getenv(oldReleaseEnv)
	if oldDir == "" {
		t.Skipf("set %s to a checkout of the previous release with make build done (make e2e does)", oldReleaseEnv)
	}
	old := filepath.Join(oldDir, "_output", "bin", "kovs-agent")
	st, err := c.s.Layout.LoadState()
	if err != nil {
		t.Fatal(err)
	}
	const proc = "node2-kovs-agent"
	spec, err := c.s.Layout.ProcessSpec(proc)
	if err != nil {
		t.Fatal(err)
	}
	// The old release's agent gets the flags it knows, as its own DaemonSet gave it: flags
	// added since (the audit log's, say) are left out, and named in the log.
	args, dropped, err := argsKnownTo(old, spec.Args)
	if err != nil {
		t.Fatalf("%s=%s: %v", oldReleaseEnv, oldDir, err)
	}
	t.Logf("node2's agent of the previous release runs without the flags it does not know: %v", dropped)
	if _, err := c.s.Layout.RestartAs(proc, old, args); err != nil {
		t.Fatalf("%s=%s: %v", oldReleaseEnv, oldDir, err)
	}
	t.Cleanup(func() {
		if _, err := c.s.Layout.RestartAs(proc, filepath.Join(st.KovsBinDir, "kovs-agent"), spec.Args); err != nil {
			t.Errorf("restore node2's agent: %v", err)
		}
	})
	// (`ip netns exec` runs it: the command line names the binary before and after the exec.)
	c.s.WaitCommandLine(t, proc, old+"\x00", "the previous release's "+old)

	nodes := []string{"node1", "node2"}
	standIns := map[string]*sink{}
	for _, n := range nodes {
		standIns[n] = newSink()
		c.follow(t, n, c.s.AgentToken(t, n), standIns[n])
	}
	// First its snapshot, then the changes: they reach it as deltas.
	framework.Eventually(t, 60*time.Second, "the previous release's agent on its first snapshot", func() error {
		_, err := c.agentsMatchScratch(nodes, standIns)
		return err
	})
	ctx := context.Background()
	api := c.s.Client.NetworkingV1().NetworkPolicies(failoverNS)
	start := time.Now()
	for i, port := range []int32{90, 91, 92} {
		p := intstr.FromInt32(port)
		np := &networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: failoverNS, Name: fmt.Sprintf("skew%d", i)},
			Spec: networkingv1.NetworkPolicySpec{PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{"role": []string{"a", "b"}[i%2]}},
				Ingress: []networkingv1.NetworkPolicyIngressRule{{
					From:  []networkingv1.NetworkPolicyPeer{{PodSelector: &metav1.LabelSelector{}}},
					Ports: []networkingv1.NetworkPolicyPort{{Port: &p}}}}}}
		if _, err := api.Create(ctx, np, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if err := api.Delete(ctx, "skew1", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	var report string
	framework.Eventually(t, 90*time.Second, "both agents, one of the previous release, on a from-scratch compile", func() error {
		var err error
		report, err = c.agentsMatchScratch(nodes, standIns)
		return err
	})
	t.Logf("node2's agent of the previous release (%s) with this controller: %s, %s after the changes",
		filepath.Base(oldDir), report, time.Since(start).Round(time.Millisecond))
}

// argsKnownTo keeps of args (as "--flag value" pairs, or "--flag=value", or a lone bool
// "--flag") those the binary's Go flag usage (`-h`) lists; it returns the dropped flags.
func argsKnownTo(binary string, args []string) (kept, dropped []string, err error) {
	out, _ := exec.Command(binary, "-h").CombinedOutput()
	known := map[string]bool{}
	for _, line := range strings.Split(string(out), "\n") {
		if f := strings.Fields(line); len(f) > 0 && strings.HasPrefix(line, "  -") {
			known[strings.TrimPrefix(f[0], "-")] = true
		}
	}
	if len(known) == 0 {
		return nil, nil, fmt.Errorf("%s -h listed no flags: %s", binary, out)
	}
	for i := 0; i < len(args); i++ {
		name, _, hasValue := strings.Cut(strings.TrimLeft(args[i], "-"), "=")
		takesNext := !hasValue && i+1 < len(args) && !strings.HasPrefix(args[i+1], "-")
		if known[name] {
			kept = append(kept, args[i])
			if takesNext {
				kept = append(kept, args[i+1])
			}
		} else {
			dropped = append(dropped, args[i])
		}
		if takesNext {
			i++
		}
	}
	return kept, dropped, nil
}
