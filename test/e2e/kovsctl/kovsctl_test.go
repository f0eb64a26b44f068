// End-to-end tests of kovsctl against a real 2-node sandbox: the built binary traces
// allowed and denied packets (same node and across nodes, ingress and egress) and must
// name the table and the NetworkPolicy that decided, and agree with a real probe of the
// same packet; `kovsctl flows` and `kovsctl pods` must agree with ovs-ofctl, ovs-vsctl and
// the API. Needs root; runs under `make e2e`.
package kovsctl_test

import "testing"

func TestKovsctl(t *testing.T) {
	c := newCluster(t, "ipv4")
	t.Run("trace", c.checkTraces)
	t.Run("trace destinations", c.checkDestinations)
	t.Run("trace conntrack", c.checkConntrack)
	t.Run("trace raw", c.checkRaw)
	t.Run("trace with one node reachable", c.checkOneNodeOnly)
	t.Run("flows", c.checkFlows)
	t.Run("flows --pod", c.checkPodFilter)
	t.Run("flows --policy", c.checkPolicyFilter)
	t.Run("pods", c.checkPods)
}

// TestKovsctlDualStack traces IPv6 packets (DST given as the pod's IPv6 address) in a
// dual-stack sandbox, and probes them for real.
func TestKovsctlDualStack(t *testing.T) {
	c := newCluster(t, "dual")
	t.Run("trace IPv6", c.checkIPv6Traces)
}
