package realnode_test

import (
	"context"
	"encoding/json"
	"net/netip"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/kovs-net/kovs/test/e2e/framework"
)

// kovs's own ports on the host network: the agent's metrics and status, the controller's
// metrics, and the policy stream (the only one agents on other nodes need).
const (
	agentMetricsPort      = 9092
	controllerMetricsPort = 9091
	policyStreamPort      = 9443
)

// checkPortsClosedToPods: from a pod, the agents' /status and /metrics and the
// controller's metrics do not answer at any node's address (dist/ binds them to
// loopback); the policy stream answers, and refuses a request without the agent's token
// (issue 14).
func checkPortsClosedToPods(t *testing.T, s *framework.Sandbox) {
	nodes, err := s.Client.CoreV1().Nodes().List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range nodes.Items {
		ip := netip.MustParseAddr(internalIP(&n))
		for _, port := range []int{agentMetricsPort, controllerMetricsPort} {
			v, err := connect(s, ns, "client-no", ip, port)
			if err != nil {
				t.Errorf("%s:%d: %v", n.Name, port, err)
			} else if v == "CONNECTED" {
				t.Errorf("a pod connects to %s's port %d (%s)", n.Name, port, ip)
			}
		}
	}
	leader := controllerNode(t, s)
	url := "https://" + leader + ":9443/v1/nodes/node1/policy"
	out, err := execIn(s, ns, "client-no", "curl", "-sk", "--max-time", "5", "-o", "/dev/null", "-w", "%{http_code}", url)
	if err != nil || strings.TrimSpace(out) != "401" {
		t.Errorf("a pod -> %s without a token: %v %q, want 401", url, err, out)
	}
}

// controllerNode is the address of the node the leading kovs-controller runs on.
func controllerNode(t *testing.T, s *framework.Sandbox) string {
	pods, err := s.Client.CoreV1().Pods("kube-system").List(context.Background(), metav1.ListOptions{LabelSelector: "app=kovs-controller,kovs.io/leader=true"})
	if err != nil || len(pods.Items) == 0 {
		t.Fatalf("no leading kovs-controller: %v", err)
	}
	return pods.Items[0].Status.HostIP
}

// checkAgentTokenIsNodeBound: root on node1 holds node1's kovs-agent token (the projected
// ServiceAccount token kubelet mounts in the agent's pod, which names node1). With it,
// node2's NetworkUnavailable condition and node1's kovs.io/node-subnets stay out of
// reach; node1's own condition, which the agent owns, does not (issue 14).
func checkAgentTokenIsNodeBound(t *testing.T, s *framework.Sandbox) {
	ctx := context.Background()
	agentPod := agentPodOn(t, s, "node1")
	token, err := s.Kubectl("exec", "-n", "kube-system", agentPod, "-c", "kovs-agent", "--",
		"cat", "/var/run/secrets/kubernetes.io/serviceaccount/token")
	if err != nil {
		t.Fatalf("read node1's agent token: %v: %s", err, token)
	}
	agent := s.TokenClient(t, strings.TrimSpace(token))
	patch := func(node string, body map[string]any) error {
		b, _ := json.Marshal(body)
		_, err := agent.CoreV1().Nodes().Patch(ctx, node, types.StrategicMergePatchType, b, metav1.PatchOptions{}, "status")
		return err
	}
	unavailable := func(status corev1.ConditionStatus) map[string]any {
		return map[string]any{"status": map[string]any{"conditions": []corev1.NodeCondition{{Type: corev1.NodeNetworkUnavailable,
			Status: status, Reason: "KovsAgentReady", Message: "realnode test", LastTransitionTime: metav1.Now(), LastHeartbeatTime: metav1.Now()}}}}
	}
	if err := patch("node2", unavailable(corev1.ConditionTrue)); err == nil {
		t.Errorf("node1's agent token set node2's NetworkUnavailable")
		_ = patch("node2", unavailable(corev1.ConditionFalse))
	} else if !apierrors.IsForbidden(err) && !apierrors.IsInvalid(err) {
		t.Errorf("node1's agent token on node2: want a refusal, got %v", err)
	}
	if err := patch("node1", map[string]any{"metadata": map[string]any{"annotations": map[string]string{"kovs.io/node-subnets": `{"ipv4":"10.244.200.0/24"}`}}}); err == nil {
		t.Errorf("node1's agent token rewrote node1's kovs.io/node-subnets")
	}
	if err := patch("node1", unavailable(corev1.ConditionFalse)); err != nil {
		t.Errorf("node1's agent token may not set node1's NetworkUnavailable: %v", err)
	}
}
