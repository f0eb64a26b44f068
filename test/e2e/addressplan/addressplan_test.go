// End-to-end tests of address plans that cannot collide: the spec.podCIDRs mode
// (kube-controller-manager --allocate-node-cidrs, kovs-controller --use-node-pod-cidrs),
// a podCIDR outside the cluster CIDRs, a node address inside one, and the controller
// refusing to start on such a plan. Needs root; runs under `make e2e`.
package addressplan_test

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kovs-net/kovs/go-controller/pkg/controller/ipam"
	"github.com/kovs-net/kovs/test/e2e/framework"
)

const podTimeout = 60 * time.Second

func TestNodePodCIDRsDualStack(t *testing.T) {
	env := framework.Require(t)
	s := framework.Up(t, env, "--nodes", "2", "--ip-family", "dual", "--node-pod-cidrs")
	ctx := context.Background()

	// Every node's blocks are the podCIDRs kube-controller-manager gave it.
	framework.Eventually(t, 60*time.Second, "node subnets from spec.podCIDRs", func() error {
		nodes, err := s.Client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
		if err != nil {
			return err
		}
		for _, n := range nodes.Items {
			ann, err := ipam.ParseNodeSubnetsAnnotation(n.Annotations[ipam.NodeSubnetsAnnotationKey])
			if err != nil {
				return fmt.Errorf("node %s: %w", n.Name, err)
			}
			var got []string
			for _, b := range ann.Blocks() {
				got = append(got, b.String())
			}
			if len(n.Spec.PodCIDRs) != 2 || !slices.Equal(got, n.Spec.PodCIDRs) {
				return fmt.Errorf("node %s: kovs.io/node-subnets %v, spec.podCIDRs %v", n.Name, got, n.Spec.PodCIDRs)
			}
		}
		return nil
	})
	// Pods get addresses from those blocks and reach each other across nodes.
	s.CreatePod(t, framework.PodSpec{Name: "a", Node: "node1"})
	s.CreatePod(t, framework.PodSpec{Name: "b", Node: "node2"})
	a, b := s.WaitRunning(t, "default", "a", podTimeout), s.WaitRunning(t, "default", "b", podTimeout)
	node2, err := s.Client.CoreV1().Nodes().Get(ctx, "node2", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, ip := range framework.PodIPs(b) {
		if !slices.ContainsFunc(node2.Spec.PodCIDRs, func(c string) bool { return netip.MustParsePrefix(c).Contains(ip) }) {
			t.Errorf("pod b's address %s is outside node2's spec.podCIDRs %v", ip, node2.Spec.PodCIDRs)
		}
		if r := s.Probe(a, ip, "80/tcp", 3*time.Second); !r.Connected || r.Reply == nil || r.Reply.Identity != "default/b" {
			t.Errorf("a -> b %s: %s", ip, framework.Describe(r))
		}
	}

	// A node whose podCIDR lies outside the cluster CIDRs is refused, loudly.
	stray := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "stray"}, Spec: corev1.NodeSpec{PodCIDRs: []string{"10.250.0.0/24", "fd00:10:250::/64"}}}
	if _, err := s.Client.CoreV1().Nodes().Create(ctx, stray, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	wantRefused(t, s, "stray", "NodePodCIDROutsideClusterCIDRs", "10.250.0.0/24")

	// So is a node whose own address is inside a cluster CIDR. It registers with its
	// address, as kubelet does: created bare and patched later, the node could get its
	// subnets in between.
	inside := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "inside"},
		Status: corev1.NodeStatus{Addresses: []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "10.244.200.1"}}}}
	if _, err := s.Client.CoreV1().Nodes().Create(ctx, inside, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	wantRefused(t, s, "inside", "NodeAddressInPodCIDR", "10.244.200.1")

	// With that node in the cluster, a restarted controller refuses the plan at start and
	// says which ranges collide.
	if out, err := s.Run("restart", "kovs-controller"); err != nil {
		t.Fatalf("restart kovs-controller: %v\n%s", err, out)
	}
	logFile := s.Layout.LogFile("kovs-controller")
	framework.Eventually(t, 60*time.Second, "kovs-controller refusing to start", func() error {
		b, err := os.ReadFile(logFile)
		if err != nil {
			return err
		}
		if !strings.Contains(string(b), "refusing to start") {
			return fmt.Errorf("no refusal in %s yet", logFile)
		}
		if s.Layout.Running("kovs-controller") {
			return fmt.Errorf("kovs-controller still runs")
		}
		if !strings.Contains(string(b), "cluster CIDR 10.244.0.0/16 overlaps node inside 10.244.200.1/32") {
			t.Errorf("the refusal does not name both ranges:\n%s", lastLines(string(b), 5))
		}
		return nil
	})
}

// wantRefused waits for the node's NetworkUnavailable=True and an Event of reason, both
// naming what collides.
func wantRefused(t *testing.T, s *framework.Sandbox, node, reason, names string) {
	t.Helper()
	ctx := context.Background()
	framework.Eventually(t, 30*time.Second, node+" refused ("+reason+")", func() error {
		n, err := s.Client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if n.Annotations[ipam.NodeSubnetsAnnotationKey] != "" {
			t.Fatalf("node %s got subnets: %s", node, n.Annotations[ipam.NodeSubnetsAnnotationKey])
		}
		cond := slices.IndexFunc(n.Status.Conditions, func(c corev1.NodeCondition) bool {
			return c.Type == corev1.NodeNetworkUnavailable && c.Status == corev1.ConditionTrue && strings.Contains(c.Message, names)
		})
		if cond < 0 {
			return fmt.Errorf("no NetworkUnavailable=True naming %s: %v", names, n.Status.Conditions)
		}
		evs, err := s.Client.CoreV1().Events("").List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + node})
		if err != nil {
			return err
		}
		for _, e := range evs.Items {
			if e.Reason == reason && strings.Contains(e.Message, names) {
				return nil
			}
		}
		return fmt.Errorf("no Event %s naming %s", reason, names)
	})
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}
