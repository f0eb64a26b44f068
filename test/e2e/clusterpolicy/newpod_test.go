package clusterpolicy_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/network-policy-api/apis/v1beta1"
	"sigs.k8s.io/network-policy-api/pkg/client/clientset/versioned"

	"github.com/kovs-net/kovs/go-controller/pkg/pipeline"
	"github.com/kovs-net/kovs/test/e2e/framework"
)

// feedInterval is how far apart the restarted kovs-controller's ClusterNetworkPolicy
// batches are: a pod created right after one waits up to that long for the next, far
// longer than the pod takes to start once its node lists it.
const feedInterval = 10 * time.Second

// testNewPodClosedUntilClusterRules runs last on TestStatusConditions's sandbox (it
// restarts kovs-controller with a slow cluster feed): an Admin Deny selects app=locked pods
// of cnp-n in both directions; a new such pod is created right after the feed's batch,
// while the NetworkPolicy compiler is as fast as ever. The pod must never connect, either
// way, before the Deny is in force: probed the moment it runs, in both directions, each
// probe fails and is counted by the Deny's conj_id flow in its Admin table. Before the
// fix the share listed the pod at once, its agent opened it, and both probes connected
// until the feed's next batch.
func testNewPodClosedUntilClusterRules(t *testing.T, s *framework.Sandbox, client versioned.Interface) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	s.CreatePod(t, framework.PodSpec{Namespace: "cnp-n", Name: "prober", Node: "node1"})
	prober := s.WaitRunning(t, "cnp-n", "prober", time.Minute)
	all := []v1beta1.ClusterNetworkPolicyIngressPeer{{Namespaces: &metav1.LabelSelector{}}}
	deny := &v1beta1.ClusterNetworkPolicy{ObjectMeta: metav1.ObjectMeta{Name: "e2e-new-pods"}, Spec: v1beta1.ClusterNetworkPolicySpec{
		Tier: v1beta1.AdminTier, Priority: 1,
		Subject: v1beta1.ClusterNetworkPolicySubject{Pods: &v1beta1.NamespacedPod{
			NamespaceSelector: metav1.LabelSelector{MatchLabels: map[string]string{"kubernetes.io/metadata.name": "cnp-n"}},
			PodSelector:       metav1.LabelSelector{MatchLabels: map[string]string{"app": "locked"}}}},
		Ingress: []v1beta1.ClusterNetworkPolicyIngressRule{{Name: "deny-in", Action: v1beta1.ClusterNetworkPolicyRuleActionDeny, From: all}},
		Egress: []v1beta1.ClusterNetworkPolicyEgressRule{{Name: "deny-out", Action: v1beta1.ClusterNetworkPolicyRuleActionDeny,
			To: []v1beta1.ClusterNetworkPolicyEgressPeer{{Namespaces: &metav1.LabelSelector{}}}}},
	}}
	if _, err := client.PolicyV1beta1().ClusterNetworkPolicies().Create(ctx, deny, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create %s: %v", deny.Name, err)
	}
	defer func() {
		_ = client.PolicyV1beta1().ClusterNetworkPolicies().Delete(context.Background(), deny.Name, metav1.DeleteOptions{})
	}()
	programmed(t, ctx, client, deny.Name, "selects no pod")

	// A controller whose cluster feed batches at most every feedInterval: its first batch
	// comes before its first share, so once node1's agent has that share, the feed's next
	// batch is feedInterval away, and the new pod's CNI ADD waits for it.
	snapshots := func() int {
		return strings.Count(processLog(t, s, "node1-kovs-agent"), "NetworkPolicy snapshot received")
	}
	before := snapshots()
	restartController(t, s, "--cluster-policy-min-sync-interval", feedInterval.String(), "--leader-elect=false")
	framework.Eventually(t, 30*time.Second, "node1's agent to receive a share from the restarted kovs-controller", func() error {
		if n := snapshots(); n <= before {
			return fmt.Errorf("%d snapshots received, as before the restart", n)
		}
		return nil
	})
	s.CreatePod(t, framework.PodSpec{Namespace: "cnp-n", Name: "locked", Node: "node1", Labels: map[string]string{"app": "locked"}})
	locked := s.WaitRunning(t, "cnp-n", "locked", time.Minute)
	for _, line := range strings.Split(processLog(t, s, "node1-kovs-agent"), "\n") {
		if strings.Contains(line, `msg="pod attached"`) && strings.Contains(line, "pod=cnp-n/locked") {
			t.Logf("the CNI ADD waited for the pod's policy (policy-took): %s", line) // for the reader; not a verdict
		}
	}
	lockedIP, proberIP := framework.PodIPs(locked)[0], framework.PodIPs(prober)[0]

	// One probe each way, at once: no retry (a later round would only find the Deny the
	// feed delivered meanwhile).
	for _, p := range []struct {
		what  string
		from  *corev1.Pod
		to    netip.Addr
		table pipeline.Table
	}{
		{"cnp-n/prober -> the new pod", prober, lockedIP, pipeline.AdminIngressPolicy},
		{"the new pod -> cnp-n/prober", locked, proberIP, pipeline.AdminEgressPolicy},
	} {
		counted := func() uint64 {
			var n uint64
			for _, f := range s.DumpFlows(t, "node1") {
				if f.Table == int(p.table.ID) && containsConjID(f.Text) {
					n += f.Packets
				}
			}
			return n
		}
		was := counted()
		if r := s.Probe(p.from, p.to, "80/tcp", 2*time.Second); r.Connected {
			t.Errorf("%s (%s) connects before the Admin Deny that selects the new pod is in force: %s", p.what, p.to, framework.Describe(r))
			continue
		}
		if now := counted(); now <= was {
			t.Errorf("%s does not connect, but no Deny flow of %s counted it (%d -> %d packets)", p.what, p.table.Name, was, now)
		}
	}
}

// restartController stops kovs-controller and starts it again with extra flags, recorded
// so that a later Start keeps them.
func restartController(t *testing.T, s *framework.Sandbox, extra ...string) {
	t.Helper()
	const name = "kovs-controller"
	spec, err := s.Layout.ProcessSpec(name)
	if err != nil {
		t.Fatal(err)
	}
	spec.Args = append(spec.Args, extra...)
	b, err := json.Marshal(spec)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Layout.Kill(name); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(s.Layout.PidDir(), name+".json"), b, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Layout.Start(name); err != nil {
		t.Fatalf("start %s with %v: %v", name, extra, err)
	}
}

// processLog is a sandbox process's log so far.
func processLog(t *testing.T, s *framework.Sandbox, process string) string {
	t.Helper()
	b, err := os.ReadFile(s.Layout.LogFile(process))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
