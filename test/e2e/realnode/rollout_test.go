package realnode_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	cnins "github.com/containernetworking/plugins/pkg/ns"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kovs-net/kovs/go-controller/pkg/sandbox/responder"
	"github.com/kovs-net/kovs/test/e2e/framework"
)

const rolloutNS = "rollout"

// TestOVSOutlivesTheAgent runs two real nodes installed from dist/, with long-lived TCP
// sessions and a new connection every 100 ms between pods on both nodes under a
// NetworkPolicy, and a pair the policy denies probed every 100 ms, through an agent
// rollout, an OVS restart (a kovs-ovs pod replaced, an OVS upgrade's step), and the agent
// DaemonSet deleted with --cascade=orphan, applied again and rolled.
func TestOVSOutlivesTheAgent(t *testing.T) {
	env := framework.Require(t)
	s := framework.Up(t, env, "--runtime", "containerd", "--nodes", "2")
	ctx := context.Background()
	s.EnsureNamespace(t, rolloutNS, nil)
	s.Apply(rolloutWorkload)
	kubectlOK(t, s, "-n", rolloutNS, "wait", "--for=condition=Ready", "pod", "--all", "--timeout=180s")
	waitRealized(t, s, rolloutNS, "servers-from-clients")
	end := map[string]podEnd{}
	for _, name := range []string{"server1", "server2", "client1", "client2", "intruder1"} {
		p, err := s.Client.CoreV1().Pods(rolloutNS).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		end[name] = podNetNS(t, s, p)
	}
	serveIn(t, end["server1"])
	serveIn(t, end["server2"])
	pairs := []pair{
		{from: end["client1"], to: end["server2"]},
		{from: end["client2"], to: end["server1"]},
		{from: end["client1"], to: end["server1"]},
		{from: end["intruder1"], to: end["server2"], denied: true},
	}
	t.Run("agent rollout leaves OVS, traffic and Ready alone", func(t *testing.T) { checkAgentRollout(t, s, pairs) })
	t.Run("kovs-ovs pod replacement pauses traffic only", func(t *testing.T) { checkOVSReplacement(t, s, pairs) })
	t.Run("DaemonSet deleted with --cascade=orphan, applied again and rolled: nothing removed", func(t *testing.T) {
		checkOrphanReplace(t, s, pairs)
	})
}

// checkOrphanReplace replaces the kovs-agent DaemonSet as a GitOps tool or an operator
// changing an immutable field does: deleted with --cascade=orphan (its pods stay), applied
// again, then rolled. Only kovsctl uninstall's annotation may make an agent clean its node
// up (docs/install.md), so every agent must see the deletion and leave its node alone, and
// the roll that shuts the orphaned agents down must remove nothing: br-int stays on every
// node, ovs-vswitchd keeps its pid, zero established sessions broken, zero allowed new
// connections failed, zero denied connections let through. (Before 2026-12-05 an agent
// marked its node for uninstall on any deletion of its DaemonSet and never unmarked it,
// so this roll deleted br-int on every node.)
func checkOrphanReplace(t *testing.T, s *framework.Sandbox, pairs []pair) {
	ctx := context.Background()
	dsClient := s.Client.AppsV1().DaemonSets("kube-system")
	ds, err := dsClient.Get(ctx, "kovs-agent", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	vswitchd := map[string]int{}
	for _, n := range []string{"node1", "node2"} {
		vswitchd[n] = ovsVswitchdPid(s, n)
	}
	orphans := podsOf(t, s, "kube-system", "app=kovs-agent")
	tr := startTraffic(t, s, pairs, 100*time.Millisecond)
	tr.await(t, 5, "before the DaemonSet's deletion")
	start := time.Now()
	kubectlOK(t, s, "-n", "kube-system", "delete", "daemonset", "kovs-agent", "--cascade=orphan", "--wait=true", "--timeout=60s")
	// Every agent must have seen the deletion, or the roll below proves nothing; none may
	// take it for an uninstall.
	framework.Eventually(t, 60*time.Second, "every orphaned agent to log the DaemonSet's deletion", func() error {
		for node, p := range orphans {
			logs, err := s.Kubectl("-n", "kube-system", "logs", p.Name, "-c", "kovs-agent")
			if err != nil {
				return fmt.Errorf("%s: %v", node, err)
			}
			if !strings.Contains(logs, "DaemonSet deleted ") {
				return fmt.Errorf("%s: the agent %s has not logged the deletion yet", node, p.Name)
			}
		}
		return nil
	})
	for node, p := range orphans {
		if logs, _ := s.Kubectl("-n", "kube-system", "logs", p.Name, "-c", "kovs-agent"); strings.Contains(logs, "kovs is being uninstalled") {
			t.Errorf("%s: the agent %s took the DaemonSet's deletion without the uninstall annotation for an uninstall", node, p.Name)
		}
	}
	again := ds.DeepCopy()
	again.ObjectMeta = metav1.ObjectMeta{Name: ds.Name, Namespace: ds.Namespace, Labels: ds.Labels}
	again.Status = appsv1.DaemonSetStatus{}
	if _, err := dsClient.Create(ctx, again, metav1.CreateOptions{}); err != nil {
		t.Fatalf("apply the DaemonSet again: %v", err)
	}
	// Roll it. The DaemonSet controller takes a pod whose pod-template-generation label
	// equals the DaemonSet's generation as up to date, and a DaemonSet made anew counts its
	// generation from 1 again, so a template change can land on the orphans' number and
	// replace nothing: change it until the generation is another.
	orphanGen := map[string]bool{}
	for _, p := range orphans {
		orphanGen[p.Labels["pod-template-generation"]] = true
	}
	for i := 0; ; i++ {
		kubectlOK(t, s, "-n", "kube-system", "patch", "daemonset", "kovs-agent", "--type=merge", "-p",
			fmt.Sprintf(`{"spec":{"template":{"metadata":{"annotations":{"kovs.io/orphan-test":"%s-%d"}}}}}`, start.Format(time.RFC3339Nano), i))
		d, err := dsClient.Get(ctx, "kovs-agent", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if !orphanGen[fmt.Sprint(d.Generation)] {
			break
		}
		if i == 3 {
			t.Fatalf("the DaemonSet's generation %d is still the orphans' %v", d.Generation, orphanGen)
		}
	}
	// The roll is done when every node runs a new agent pod, Ready, and no orphan is
	// left: the DaemonSet's status alone can be read before it has seen the new template.
	framework.Eventually(t, 300*time.Second, "the re-applied DaemonSet to replace every orphaned agent", func() error {
		list, err := s.Client.CoreV1().Pods("kube-system").List(ctx, metav1.ListOptions{LabelSelector: "app=kovs-agent"})
		if err != nil {
			return err
		}
		ready := map[string]bool{}
		for _, p := range list.Items {
			if old, ok := orphans[p.Spec.NodeName]; ok && old.UID == p.UID {
				return fmt.Errorf("%s: the orphaned agent %s still runs", p.Spec.NodeName, p.Name)
			}
			if podReady(p) && p.DeletionTimestamp == nil {
				ready[p.Spec.NodeName] = true
			}
		}
		if len(ready) != len(orphans) {
			return fmt.Errorf("new agents Ready on %d of %d nodes", len(ready), len(orphans))
		}
		return nil
	})
	tr.await(t, 20, "after the roll")
	tr.finish()
	t.Logf("kovs-agent DaemonSet deleted with --cascade=orphan, applied again and rolled on 2 nodes in %s", time.Since(start).Round(time.Millisecond))
	tr.check(t, "the DaemonSet's replacement and roll")
	for node, p := range podsOf(t, s, "kube-system", "app=kovs-ovs") {
		if out, err := execIn(s, "kube-system", p.Name, "ovs-vsctl", "--timeout=5", "br-exists", "br-int"); err != nil {
			t.Errorf("%s: br-int is gone after the roll: %v\n%s", node, err, out)
		}
		if after := ovsVswitchdPid(s, node); after != vswitchd[node] {
			t.Errorf("%s: ovs-vswitchd pid %d before, %d after", node, vswitchd[node], after)
		}
	}
	checkReadySince(t, s, start, "the DaemonSet's replacement")
}

// checkAgentRollout rolls the kovs-agent DaemonSet (a change to its pod template, as
// every kovs upgrade makes). OVS runs in its own DaemonSet, so the rollout must leave it
// alone: ovs-vswitchd keeps its pid on every node and the kovs-ovs pods are not
// replaced. Zero established sessions broken, zero allowed new connections failed, zero
// denied connections let through, and no node's Ready condition changes.
func checkAgentRollout(t *testing.T, s *framework.Sandbox, pairs []pair) {
	vswitchd := map[string]int{}
	for _, n := range []string{"node1", "node2"} {
		if vswitchd[n] = ovsVswitchdPid(s, n); vswitchd[n] == 0 {
			t.Fatalf("%s: no ovs-vswitchd runs in the node's containers", n)
		}
	}
	ovsPods := podsOf(t, s, "kube-system", "app=kovs-ovs")
	oldAgents := podsOf(t, s, "kube-system", "app=kovs-agent")

	tr := startTraffic(t, s, pairs, 100*time.Millisecond)
	tr.await(t, 5, "before the rollout")
	start := time.Now()
	kubectlOK(t, s, "-n", "kube-system", "patch", "daemonset", "kovs-agent", "--type=merge", "-p",
		fmt.Sprintf(`{"spec":{"template":{"metadata":{"annotations":{"kovs.io/rollout-test":%q}}}}}`, start.Format(time.RFC3339Nano)))
	kubectlOK(t, s, "-n", "kube-system", "rollout", "status", "daemonset/kovs-agent", "--timeout=300s")
	rolled := time.Since(start)
	for node, p := range podsOf(t, s, "kube-system", "app=kovs-agent") {
		if old, ok := oldAgents[node]; ok && old.UID == p.UID {
			t.Fatalf("%s: the agent pod %s was not replaced by the rollout", node, p.Name)
		}
	}
	tr.await(t, 20, "after the rollout")
	tr.finish()
	t.Logf("kovs-agent DaemonSet rolled on 2 nodes in %s", rolled.Round(time.Millisecond))
	tr.check(t, "the agent rollout")

	for n, before := range vswitchd {
		after := ovsVswitchdPid(s, n)
		t.Logf("%s: ovs-vswitchd pid %d before the rollout, %d after", n, before, after)
		if after != before {
			t.Errorf("%s: the agent rollout restarted ovs-vswitchd (pid %d, now %d)", n, before, after)
		}
	}
	for n, p := range podsOf(t, s, "kube-system", "app=kovs-ovs") {
		if old := ovsPods[n]; old.UID != p.UID || restarts(p) != restarts(old) {
			t.Errorf("%s: the kovs-ovs pod changed during the agent rollout: %s (%d restarts) became %s (%d restarts)",
				n, old.Name, restarts(old), p.Name, restarts(p))
		}
	}
	checkReadySince(t, s, start, "the rollout")
}

// checkOVSReplacement deletes node2's kovs-ovs pod, as an OVS upgrade does node by node,
// under the same traffic, and measures the pause: on the userspace datapath the datapath
// lives in ovs-vswitchd, so traffic through node2 stops until the new ovs-vswitchd runs
// and the agent has put its flows back. Established sessions must survive it (their
// echoes wait up to 60 s, TCP retransmitting meanwhile), the denied pair must never
// connect, every node stays Ready, and after it every new connection succeeds again. The
// longest run of failed new connections is the pause, printed.
func checkOVSReplacement(t *testing.T, s *framework.Sandbox, pairs []pair) {
	before := ovsVswitchdPid(s, "node2")
	old, ok := podsOf(t, s, "kube-system", "app=kovs-ovs")["node2"]
	if before == 0 || !ok {
		t.Fatalf("node2: no ovs-vswitchd (pid %d) or no kovs-ovs pod", before)
	}
	tr := startTrafficEcho(t, s, pairs, 100*time.Millisecond, 60*time.Second)
	tr.await(t, 5, "before the OVS restart")
	start := time.Now()
	tr.quietFrom(start)
	kubectlOK(t, s, "-n", "kube-system", "delete", "pod", old.Name, "--wait=true", "--timeout=120s")
	framework.Eventually(t, 120*time.Second, "node2's new kovs-ovs pod Ready", func() error {
		p, ok := podsOf(t, s, "kube-system", "app=kovs-ovs")["node2"]
		if !ok || p.UID == old.UID {
			return fmt.Errorf("no new pod yet")
		}
		if podReady(p) {
			return nil
		}
		return fmt.Errorf("pod %s not Ready", p.Name)
	})
	replaced := time.Since(start)
	after := ovsVswitchdPid(s, "node2")
	if after == 0 || after == before {
		t.Fatalf("node2: ovs-vswitchd pid %d before, %d after: it was not restarted", before, after)
	}
	// The repair's signal, from when on the denied pair's probes need evidence again:
	// a new connection across node2's new switch, client1 -> server2.
	framework.Eventually(t, 60*time.Second, "client1 -> server2 through node2's new ovs-vswitchd", func() error {
		var r responder.Result
		if err := cnins.WithNetNSPath(pairEnd(pairs, "client1").netns, func(cnins.NetNS) error {
			r = responder.Probe(context.Background(), target(pairEnd(pairs, "server2").addr), probeTimeout)
			return nil
		}); err != nil {
			return err
		}
		if !r.Connected || r.Reply == nil {
			return fmt.Errorf("%s", framework.Describe(r))
		}
		return nil
	})
	tr.quietUntil(time.Now())
	tr.await(t, 20, "after the OVS restart")
	tr.finish()
	pause := tr.report(t, "node2's kovs-ovs pod replacement")
	t.Logf("node2's kovs-ovs pod replaced (ovs-vswitchd pid %d -> %d), Ready in %s; longest run of failed new connections: %s",
		before, after, replaced.Round(time.Millisecond), pause.Round(time.Millisecond))

	again := startTraffic(t, s, pairs, 100*time.Millisecond)
	again.await(t, 20, "once OVS is back")
	again.finish()
	again.check(t, "the 20 rounds once OVS is back")
	checkReadySince(t, s, start, "the OVS restart")
}

// pairEnd is the pod named name among the pairs' ends.
func pairEnd(pairs []pair, name string) podEnd {
	for _, p := range pairs {
		for _, e := range []podEnd{p.from, p.to} {
			if e.name == name {
				return e
			}
		}
	}
	panic("no pod " + name + " among the pairs")
}

func restarts(p corev1.Pod) int32 {
	var n int32
	for _, c := range p.Status.ContainerStatuses {
		n += c.RestartCount
	}
	return n
}

// checkReadySince requires every node Ready now, Ready since before since (when what
// began): a node that went NotReady in between, even for one status update, has a later
// transition time.
func checkReadySince(t *testing.T, s *framework.Sandbox, since time.Time, what string) {
	t.Helper()
	nodes, err := s.Client.CoreV1().Nodes().List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range nodes.Items {
		for _, c := range n.Status.Conditions {
			if c.Type != corev1.NodeReady {
				continue
			}
			t.Logf("%s: Ready=%s since %s (%s began %s)", n.Name, c.Status, c.LastTransitionTime.Format(time.RFC3339), what, since.Format(time.RFC3339))
			// LastTransitionTime has whole seconds: a transition in the second the
			// rollout began counts as during it.
			if c.Status != corev1.ConditionTrue || !c.LastTransitionTime.Time.Before(since.Truncate(time.Second)) {
				t.Errorf("%s: Ready=%s, last transition %s, during %s (from %s): %s", n.Name, c.Status,
					c.LastTransitionTime.Format(time.RFC3339), what, since.Format(time.RFC3339), c.Message)
			}
		}
	}
}

// Servers on both nodes open to the clients only; a client and an intruder on node1, a
// client on node2. The test's responders listen on port 80 in the servers' namespaces.
var rolloutWorkload = `apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: servers-from-clients, namespace: ` + rolloutNS + `}
spec:
  podSelector: {matchLabels: {role: server}}
  policyTypes: [Ingress]
  ingress:
    - from: [{podSelector: {matchLabels: {role: client}}}]
      ports: [{protocol: TCP, port: 80}]
` + rolloutPod("server1", "server", "node1") + rolloutPod("server2", "server", "node2") +
	rolloutPod("client1", "client", "node1") + rolloutPod("client2", "client", "node2") +
	rolloutPod("intruder1", "intruder", "node1")

func rolloutPod(name, role, node string) string {
	return `---
apiVersion: v1
kind: Pod
metadata: {name: ` + name + `, namespace: ` + rolloutNS + `, labels: {role: ` + role + `}}
spec:
  nodeName: ` + node + `
  containers: [{name: c, image: ` + agnhost + `, imagePullPolicy: IfNotPresent, args: [pause]}]
`
}

// podReady reports whether the pod's Ready condition is True.
func podReady(p corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}
