// End-to-end tests of the cluster's edges in real sandboxes: pod traffic leaving the
// cluster (masquerade, the no-masquerade list, NetworkPolicy ipBlock before translation)
// against the sandbox's external host, and hostPort from another node, from the external
// host and from the node itself; Egress IPs (the selected pods leave with the egress IP,
// from the holder and through the tunnel, and keep leaving with it after the holder
// fails); pod bandwidth annotations (bulk TCP transfers at most 1.2 times the limit, an
// unlimited neighbour not held back). Needs root; runs under `make e2e`.
package edges_test

import (
	"net/netip"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/kovs-net/kovs/go-controller/pkg/sandbox"
	"github.com/kovs-net/kovs/test/e2e/framework"
)

const (
	podTimeout   = 60 * time.Second
	probeTimeout = 3 * time.Second
	// The external host's second addresses stand for a routed network: the nodes do not
	// masquerade traffic to them.
	noMasquerade = "172.30.0.251/32,fd00:172:30::fb/128"
)

func TestEdgesIPv4(t *testing.T) {
	c := newEdges(t, "ipv4")
	t.Run("pods reach the external host as their node", c.checkMasquerade)
	t.Run("no-masquerade destinations see the pod", c.checkNoMasquerade)
	t.Run("egress ipBlock judges the pod before translation", c.checkEgressPolicy)
	t.Run("hostPort matrix", c.checkHostPort)
	t.Run("Egress IP", c.checkEgressIP)
	t.Run("bandwidth", c.checkBandwidth)
	t.Run("bandwidth follows the pod", c.checkBandwidthState)
	t.Run("Egress IP failover", c.checkEgressFailover) // leaves the holder's node down
	t.Run("node loss and deletion", c.checkNodeLoss)   // removes that node: last
}

func TestEdgesIPv6(t *testing.T) {
	c := newEdges(t, "ipv6")
	t.Run("pods reach the external host as their node", c.checkMasquerade)
	t.Run("no-masquerade destinations see the pod", c.checkNoMasquerade)
	t.Run("egress ipBlock judges the pod before translation", c.checkEgressPolicy)
	t.Run("hostPort matrix", c.checkHostPort)
	t.Run("Egress IP", c.checkEgressIP)
	t.Run("bandwidth", c.checkBandwidth)
}

func TestEdgesDualStack(t *testing.T) {
	c := newEdges(t, "dual")
	t.Run("pods reach the external host as their node", c.checkMasquerade)
	t.Run("no-masquerade destinations see the pod", c.checkNoMasquerade)
	t.Run("hostPort matrix", c.checkHostPort)
	t.Run("Egress IP", c.checkEgressIP)
	t.Run("bandwidth", c.checkBandwidth)
}

// edges is a 3-node sandbox with a pod on every node (x/a on node1, x/b on node1, x/c on
// node2, x/d on node3) and the hostPort pod x/hp on node1.
type edges struct {
	s      *framework.Sandbox
	family sandbox.IPFamily
	pods   map[string]*corev1.Pod
	ext    framework.Client
}

var placement = map[string]string{"a": "node1", "b": "node1", "c": "node2", "d": "node3"}

func newEdges(t *testing.T, family string) *edges {
	env := framework.Require(t)
	s := framework.Up(t, env, "--nodes", "3", "--ip-family", family, "--no-masquerade-cidrs", noMasquerade)
	c := &edges{s: s, family: sandbox.IPFamily(family), pods: map[string]*corev1.Pod{}, ext: s.ExternalClient(t)}
	for name, node := range placement {
		s.CreatePod(t, framework.PodSpec{Namespace: "x", Name: name, Node: node, Labels: map[string]string{"pod": name}})
	}
	s.CreatePod(t, framework.PodSpec{Namespace: "x", Name: "hp", Node: "node1", Ports: []corev1.ContainerPort{
		{ContainerPort: 80, HostPort: hostPort}, {ContainerPort: 80, HostPort: hostPort, Protocol: corev1.ProtocolUDP}}})
	for name := range placement {
		c.pods[name] = s.WaitRunning(t, "x", name, podTimeout)
	}
	c.pods["hp"] = s.WaitRunning(t, "x", "hp", podTimeout)
	s.WaitNodesReady(t)
	return c
}

// external is the external host's ordinary address of the family of like.
func external(like netip.Addr) netip.Addr {
	if like.Is6() {
		return sandbox.ExternalV6
	}
	return sandbox.ExternalV4
}

// routed is the external host's no-masquerade address of the family of like.
func routed(like netip.Addr) netip.Addr {
	if like.Is6() {
		return sandbox.ExternalRoutedV6
	}
	return sandbox.ExternalRoutedV4
}

// nodeAddr is the node's underlay address of the family of like.
func (c *edges) nodeAddr(t *testing.T, node string, like netip.Addr) netip.Addr {
	t.Helper()
	for _, a := range c.s.NodeIPs(t, node) {
		if a.Is6() == like.Is6() {
			return a
		}
	}
	t.Fatalf("node %s has no address of the family of %s", node, like)
	return netip.Addr{}
}
