// End-to-end tests of kovs pod networking in real sandboxes (3 nodes, each with its own
// OVS and kovs-agent, a real kube-apiserver and kovs-controller): the four guarantees of
// the Kubernetes network model on IPv4, IPv6 and dual-stack, MTU, spoofing, churn, and
// restarts of kovs-agent and ovs-vswitchd. Needs root; runs under `make e2e`.
package podnetwork_test

import (
	"testing"

	"github.com/kovs-net/kovs/test/e2e/framework"
)

func TestPodNetworkIPv4(t *testing.T) {
	env := framework.Require(t)
	s := framework.Up(t, env, "--nodes", "3", "--ip-family", "ipv4")
	s.WaitNodesReady(t)
	c := newCluster(t, s)
	t.Run("four guarantees", c.checkGuarantees)
	t.Run("MTU", c.checkMTU)
	t.Run("spoofing gets nothing through", c.checkSpoofing)
	t.Run("forged pod annotation", c.checkForgedAnnotation)
	t.Run("tunnel inner source", c.checkTunnelInnerSource)
	t.Run("forged Geneve from a host process", c.checkForgedGeneveFromHost)
	t.Run("tunnel steering through a node's addresses", c.checkTunnelSteering)
	t.Run("what the agent's loopback servers tell a hostNetwork pod", c.checkLoopbackServers)
	t.Run("one bad peer", c.checkBadPeer)
	t.Run("kovs-agent restart keeps connections", c.checkAgentRestart)
	t.Run("ovs-vswitchd restart is repaired", c.checkVswitchdRestart)
	t.Run("ovs-vswitchd restart with flow-restore-wait", c.checkFlowRestoreWaitRestart)
	t.Run("kovs-agent without the controller fails closed", c.checkAgentFailsClosed)
	t.Run("churn", c.checkChurn)
}

func TestPodNetworkIPv6(t *testing.T) {
	env := framework.Require(t)
	s := framework.Up(t, env, "--nodes", "3", "--ip-family", "ipv6")
	s.WaitNodesReady(t)
	c := newCluster(t, s)
	t.Run("four guarantees", c.checkGuarantees)
	t.Run("MTU", c.checkMTU)
	t.Run("spoofing gets nothing through", c.checkSpoofing)
	t.Run("IPv6 neighbourhood attacks", c.checkIPv6Neighbourhood)
	t.Run("tunnel inner source", c.checkTunnelInnerSource)
	t.Run("forged Geneve from a host process", c.checkForgedGeneveFromHost)
}

func TestPodNetworkDualStack(t *testing.T) {
	env := framework.Require(t)
	s := framework.Up(t, env, "--nodes", "3", "--ip-family", "dual")
	s.WaitNodesReady(t)
	c := newCluster(t, s)
	t.Run("four guarantees", c.checkGuarantees)
}
