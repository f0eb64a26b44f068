package policystream_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kovs-net/kovs/go-controller/pkg/agent"
	"github.com/kovs-net/kovs/go-controller/pkg/sandbox"
	"github.com/kovs-net/kovs/test/e2e/framework"
)

// checkOlderController is the wrong upgrade order: the agents upgraded before the
// controller. Every kovs-controller replica is restarted as the binary of the release at
// UPGRADE_FROM, then node2's kovs-agent is restarted (as an agent rollout would) with this
// release's binary. What docs/upgrades.md promises: the agents refuse that controller's
// policy (it hands out and annotates pod addresses of its own and compiles NetworkPolicy
// from them), say so with the fix (a ControllerTooOld Event on the Node, the readiness
// check), and the restarted agent holds its node as the previous agent left it (br-int's
// flows of the previous round, past the wait after which an agent without policy goes
// ahead closed) and serves no pod; once this release's controller is back, the agents
// take its policy and node2's agent programs br-int.
func (c *cluster) checkOlderController(t *testing.T) {
	oldDir := os.Getenv(oldReleaseEnv)
	if oldDir == "" {
		t.Skipf("set %s to a checkout of the previous release with make build done (make e2e does)", oldReleaseEnv)
	}
	oldController := filepath.Join(oldDir, "_output", "bin", "kovs-controller")
	st, err := c.s.Layout.LoadState()
	if err != nil {
		t.Fatal(err)
	}
	// Both agents programmed and ready first (the subtest before restores node2's agent):
	// br-int's round must not move for any other reason.
	for _, n := range []string{"node1", "node2"} {
		framework.Eventually(t, 60*time.Second, n+"'s agent ready before the skew", func() error {
			_, err := c.s.AgentGet(n, "/readyz")
			return err
		})
	}
	replicas := sandbox.ControllerReplicas(*st)
	specs := map[string]sandbox.Process{}
	for _, r := range replicas {
		if specs[r.Process], err = c.s.Layout.ProcessSpec(r.Process); err != nil {
			t.Fatal(err)
		}
	}
	restoreControllers := func() error {
		for _, r := range replicas {
			if _, err := c.s.Layout.RestartAs(r.Process, filepath.Join(st.KovsBinDir, "kovs-controller"), specs[r.Process].Args); err != nil {
				return fmt.Errorf("restore %s: %w", r.Process, err)
			}
		}
		return nil
	}
	restored := false
	t.Cleanup(func() {
		if !restored {
			if err := restoreControllers(); err != nil {
				t.Error(err)
			}
		}
	})
	for _, r := range replicas {
		args, dropped, err := argsKnownTo(oldController, specs[r.Process].Args)
		if err != nil {
			t.Fatalf("%s=%s: %v", oldReleaseEnv, oldDir, err)
		}
		t.Logf("%s of the previous release runs without the flags it does not know: %v", r.Process, dropped)
		if _, err := c.s.Layout.RestartAs(r.Process, oldController, args); err != nil {
			t.Fatalf("%s=%s: %v", oldReleaseEnv, oldDir, err)
		}
	}
	skewStart := time.Now()

	// node2's agent as an agent rollout restarts it, node2's br-int as the agent before it
	// left it. Its policy wait is cut from the default 30 s: the hold checked below is
	// logged once that wait is over.
	const proc = "node2-kovs-agent"
	const policyWait = 5 * time.Second
	agentSpec, err := c.s.Layout.ProcessSpec(proc)
	if err != nil {
		t.Fatal(err)
	}
	before := flowRounds(c.s.DumpFlows(t, "node2"))
	if _, err := c.s.Layout.RestartAs(proc, agentSpec.Path, append(slices.Clone(agentSpec.Args), "--policy-wait="+policyWait.String())); err != nil {
		t.Fatal(err)
	}
	restarted := time.Now()

	// Both agents say why, with the fix: node1's (running) and node2's (just started). An
	// agent that takes the old controller's policy reprograms br-int instead: either
	// settles the wait.
	since := map[string]time.Time{"node1": skewStart, "node2": restarted}
	msgs := map[string]string{}
	var reprogrammed []uint64
	framework.Eventually(t, 120*time.Second, "both agents' "+agent.ReasonControllerTooOld+" Events, or node2's br-int reprogrammed", func() error {
		flows, err := c.s.ListFlows("node2")
		if err != nil {
			return err
		}
		if r := flowRounds(flows); !slices.Equal(r, before) {
			reprogrammed = r
			return nil
		}
		for n, at := range since {
			if msgs[n], err = c.nodeEvent(n, agent.ReasonControllerTooOld, at); err != nil {
				return err
			}
		}
		return nil
	})
	if reprogrammed != nil {
		t.Fatalf("node2's agent programmed br-int (flows of rounds %v, the previous agent's %v) beside the previous release's controller", reprogrammed, before)
	}
	for n, msg := range msgs {
		if !strings.Contains(msg, "upgrade kovs-controller first") {
			t.Errorf("%s's %s Event does not name the fix: %q", n, agent.ReasonControllerTooOld, msg)
		}
		_, err := c.s.AgentGet(n, "/readyz")
		if err == nil || !strings.Contains(err.Error(), "upgrade kovs-controller first") {
			t.Errorf("%s's agent /readyz with the previous release's controller: %v, want not ready naming the fix", n, err)
		}
	}
	t.Logf("both agents refused the previous release's controller, %s after its start", time.Since(skewStart).Round(time.Millisecond))

	// A new pod on each node gets no address: node1's running agent refuses its CNI ADD
	// naming the fix (node2's new agent serves no CNI at all: checked below).
	const podNS = "skew-controller"
	for _, n := range []string{"node1", "node2"} {
		c.s.CreatePod(t, framework.PodSpec{Namespace: podNS, Name: "on-" + n, Node: n})
	}
	emulatorLog := c.s.Layout.LogFile("node1-emulator")
	var refusal string
	framework.Eventually(t, 60*time.Second, "node1's pod refused", func() error {
		b, err := os.ReadFile(emulatorLog)
		if err != nil {
			return err
		}
		for _, l := range strings.Split(string(b), "\n") {
			if strings.Contains(l, "pod="+podNS+"/on-node1") && strings.Contains(l, "upgrade kovs-controller first") {
				refusal = l
				return nil
			}
		}
		return fmt.Errorf("no line on pod %s/on-node1 naming the fix in %s", podNS, emulatorLog)
	})
	t.Logf("node1's pod refused: %s", framework.Clip([]byte(refusal)))
	noAddress := func(node string) {
		t.Helper()
		pod, err := c.s.Client.CoreV1().Pods(podNS).Get(context.Background(), "on-"+node, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if len(pod.Status.PodIPs) != 0 {
			t.Errorf("pod %s/on-%s has addresses %v beside the previous release's controller", podNS, node, pod.Status.PodIPs)
		}
	}
	noAddress("node1")

	// node2's agent got past the wait after which an agent with no policy goes ahead with
	// its pods closed, and held br-int as it was.
	log := c.s.Layout.LogFile(proc)
	framework.Eventually(t, 90*time.Second, "node2's agent holding br-int past its policy wait", func() error {
		b, err := os.ReadFile(log)
		if err != nil {
			return err
		}
		if !strings.Contains(string(b), "holding br-int's flows as the previous agent left them") {
			return fmt.Errorf("no hold in %s", log)
		}
		return nil
	})
	held := time.Since(restarted)
	if after := flowRounds(c.s.DumpFlows(t, "node2")); !slices.Equal(after, before) {
		t.Fatalf("node2's br-int holds flows of rounds %v after its agent's restart beside the previous release's controller, want the previous agent's %v", after, before)
	}
	if _, err := c.s.AgentGet("node2", "/status"); err != nil {
		t.Fatalf("node2's agent is not running: %v", err)
	}
	noAddress("node2")
	t.Logf("node2's agent held br-int (rounds %v) %s after its restart", before, held.Round(time.Millisecond))

	// This release's controller back: the agents take its policy, node2's programs br-int.
	if err := restoreControllers(); err != nil {
		t.Fatal(err)
	}
	restored = true
	back := time.Now()
	nodes := []string{"node1", "node2"}
	standIns := map[string]*sink{}
	for _, n := range nodes {
		standIns[n] = newSink()
		c.follow(t, n, c.s.AgentToken(t, n), standIns[n])
	}
	var report string
	framework.Eventually(t, 150*time.Second, "both agents on this release's controller's policy", func() error {
		var err error
		report, err = c.agentsMatchScratch(nodes, standIns)
		return err
	})
	for _, n := range nodes {
		pod := c.s.WaitRunning(t, podNS, "on-"+n, 60*time.Second)
		if len(pod.Status.PodIPs) == 0 {
			t.Errorf("pod %s/on-%s runs without an address", podNS, n)
		}
	}
	after := flowRounds(c.s.DumpFlows(t, "node2"))
	if len(after) != 1 || slices.Contains(before, after[0]) {
		t.Errorf("node2's br-int after the controller's upgrade holds rounds %v, want one new round (the previous agent's: %v)", after, before)
	}
	for _, n := range nodes {
		framework.Eventually(t, 30*time.Second, n+"'s agent ready", func() error {
			_, err := c.s.AgentGet(n, "/readyz")
			return err
		})
	}
	t.Logf("this release's controller back: %s, %s after its restart", report, time.Since(back).Round(time.Millisecond))
}

// flowRounds lists the cookie rounds (the top 16 bits) of flows, sorted.
func flowRounds(flows []framework.Flow) []uint64 {
	var rounds []uint64
	for _, f := range flows {
		if r := f.Cookie >> 48; !slices.Contains(rounds, r) {
			rounds = append(rounds, r)
		}
	}
	slices.Sort(rounds)
	return rounds
}

// nodeEvent returns the message of the newest Event with reason on Node node since since.
func (c *cluster) nodeEvent(node, reason string, since time.Time) (string, error) {
	evs, err := c.s.Client.CoreV1().Events("").List(context.Background(), metav1.ListOptions{
		FieldSelector: "involvedObject.kind=Node,involvedObject.name=" + node + ",reason=" + reason})
	if err != nil {
		return "", err
	}
	var msg string
	var at time.Time
	for _, e := range evs.Items {
		when := e.LastTimestamp.Time
		if when.IsZero() {
			when = e.EventTime.Time
		}
		// (Event times are whole seconds.)
		if !when.Before(since.Truncate(time.Second)) && when.After(at) {
			msg, at = e.Message, when
		}
	}
	if msg == "" {
		return "", fmt.Errorf("no %s Event on %s since %s (%d before)", reason, node, since.Format(time.TimeOnly), len(evs.Items))
	}
	return msg, nil
}
