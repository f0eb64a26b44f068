// End-to-end tests of operating kovs in a real 2-node sandbox: the agents' and the
// controller's /metrics, /healthz and /readyz, and `kovsctl status`, against what the
// sandbox really holds (pods per node, flows on each br-int); flows deleted by hand must be
// put back by the agent's periodic resync; then a node's ovs-vswitchd
// is stopped and readiness and status must say so. Needs root; runs under `make e2e`.
package operate_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kovs-net/kovs/go-controller/pkg/controller/realization"
	"github.com/kovs-net/kovs/test/e2e/framework"
)

const (
	ns         = "op"
	podTimeout = 90 * time.Second
)

// placement puts three pods on node1 and two on node2, plus a hostNetwork pod per node
// (which the agent never sees as a CNI ADD and the controller gives no address).
var placement = map[string]string{"a1": "node1", "a2": "node1", "a3": "node1", "b1": "node2", "b2": "node2"}

var nodes = []string{"node1", "node2"}

// cluster is the sandbox under test with its pods.
type cluster struct {
	s     *framework.Sandbox
	env   framework.Env
	pods  map[string]*corev1.Pod
	hosts map[string]*corev1.Pod // hostNetwork pod by node
}

// podsOn counts the kovs (not hostNetwork) pods placed on node.
func podsOn(node string) int {
	n := 0
	for _, where := range placement {
		if where == node {
			n++
		}
	}
	return n
}

const policy = `
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: b-from-a, namespace: op}
spec:
  podSelector: {matchLabels: {app: b}}
  policyTypes: [Ingress]
  ingress:
  - from: [{podSelector: {matchLabels: {app: a}}}]
    ports: [{protocol: TCP, port: 80}]
`

func TestOperate(t *testing.T) {
	env := framework.Require(t)
	s := framework.Up(t, env, "--nodes", "2", "--ip-family", "ipv4")
	c := &cluster{s: s, env: env, pods: map[string]*corev1.Pod{}, hosts: map[string]*corev1.Pod{}}
	c.start(t)
	t.Run("agent metrics", c.checkAgentMetrics)
	t.Run("controller metrics", c.checkControllerMetrics)
	t.Run("health endpoints", c.checkHealth)
	t.Run("kovsctl status", c.checkStatus)
	t.Run("a del-flows is repaired by the resync", c.checkResyncRepairsDelFlows)
	t.Run("stopped ovs-vswitchd is reported", c.checkVswitchdDown)
	t.Run("stopped kovs-agent is reported", c.checkAgentDown)
}

// start creates the pods, a policy, and traffic between the nodes.
func (c *cluster) start(t *testing.T) {
	for name, node := range placement {
		app := name[:1]
		c.s.CreatePod(t, framework.PodSpec{Namespace: ns, Name: name, Node: node, Labels: map[string]string{"app": app}})
	}
	for _, node := range nodes {
		c.s.CreatePod(t, framework.PodSpec{Namespace: ns, Name: "host-" + node, Node: node, HostNetwork: true})
	}
	for name := range placement {
		c.pods[name] = c.s.WaitRunning(t, ns, name, podTimeout)
	}
	for _, node := range nodes {
		c.hosts[node] = c.s.WaitRunning(t, ns, "host-"+node, podTimeout)
	}
	c.s.Apply(policy)
	framework.Eventually(t, 60*time.Second, "b-from-a realized on every node it concerns", func() error {
		np, err := c.s.Client.NetworkingV1().NetworkPolicies(ns).Get(context.Background(), "b-from-a", metav1.GetOptions{})
		if err != nil {
			return err
		}
		st, err := realization.ParseStatus(np.Annotations[realization.AnnotationKey])
		if err != nil {
			return err
		}
		if !st.Complete() || st.Concerned == 0 {
			return fmt.Errorf("status %s", st)
		}
		return nil
	})
	// Traffic: every a-pod to every b-pod across the tunnel, allowed by the policy.
	for _, from := range []string{"a1", "a2", "a3"} {
		for _, to := range []string{"b1", "b2"} {
			dst := framework.PodIPs(c.pods[to])[0]
			framework.Eventually(t, 20*time.Second, from+" -> "+to, func() error {
				if r := c.s.Probe(c.pods[from], dst, "80/tcp", time.Second); !r.Connected {
					return fmt.Errorf("%s", framework.Describe(r))
				}
				return nil
			})
		}
	}
	// And one the policy drops: b1 -> b2 (b accepts only from a).
	if r := c.s.Probe(c.pods["b1"], framework.PodIPs(c.pods["b2"])[0], "80/tcp", time.Second); r.Connected {
		t.Fatalf("b1 -> b2 connected although b-from-a isolates b2")
	}
}
