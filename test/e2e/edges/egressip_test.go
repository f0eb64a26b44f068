package edges_test

import (
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/kovs-net/kovs/go-controller/pkg/sandbox"
	"github.com/kovs-net/kovs/test/e2e/framework"
)

// The egress IPs of the test's Egress: free addresses of the underlay, where the external
// host reaches them through the holder's neighbour answers.
var (
	egressV4 = netip.MustParseAddr("172.30.0.240")
	egressV6 = netip.MustParseAddr("fd00:172:30::f0")
)

// failoverProbe bounds each connection attempt during a failover: the resolution of the
// measured time (a lost SYN would be sent again only after 1 s).
const failoverProbe = 200 * time.Millisecond

// egressIPs are the test Egress's IPs, one per family of the sandbox.
func (c *edges) egressIPs() []netip.Addr {
	switch c.family {
	case "ipv4":
		return []netip.Addr{egressV4}
	case "ipv6":
		return []netip.Addr{egressV6}
	}
	return []netip.Addr{egressV4, egressV6}
}

func egressOf(like netip.Addr) netip.Addr {
	if like.Is6() {
		return egressV6
	}
	return egressV4
}

// applyEgress selects x/a (node1) and x/c (node2), held by node2 or node3, and waits for
// the controller to assign it.
func (c *edges) applyEgress(t testing.TB) string {
	t.Helper()
	var ips []string
	for _, ip := range c.egressIPs() {
		ips = append(ips, fmt.Sprintf("%q", ip))
	}
	c.s.Apply(`apiVersion: kovs.io/v1alpha1
kind: Egress
metadata: {name: eg}
spec:
  egressIPs: [` + strings.Join(ips, ", ") + `]
  namespaceSelector: {matchLabels: {kubernetes.io/metadata.name: x}}
  podSelector: {matchExpressions: [{key: pod, operator: In, values: [a, c]}]}
  nodeSelector: {matchExpressions: [{key: kubernetes.io/hostname, operator: In, values: [node2, node3]}]}
`)
	return c.waitHolder(t, "")
}

// waitHolder waits until the Egress is held by a node other than not, and returns it.
func (c *edges) waitHolder(t testing.TB, not string) string {
	t.Helper()
	var holder string
	framework.Eventually(t, 60*time.Second, "the Egress assigned to a node other than "+not, func() error {
		out, err := c.s.Kubectl("get", "egress", "eg", "-o", "jsonpath={.status.node}")
		if err != nil {
			return fmt.Errorf("%v: %s", err, out)
		}
		if holder = strings.TrimSpace(out); holder == "" || holder == not {
			return fmt.Errorf("status.node is %q", holder)
		}
		return nil
	})
	return holder
}

// checkEgressIP: the pods the Egress selects reach the external host with the egress IP,
// from the holder's node and through the tunnel from another node; the pods it does not
// select still leave as their node; nothing leaves with a pod address.
func (c *edges) checkEgressIP(t *testing.T) {
	holder := c.applyEgress(t)
	t.Logf("Egress held by %s", holder)
	for _, name := range []string{"a", "c"} {
		pod := c.pods[name]
		for _, ip := range framework.PodIPs(pod) {
			framework.Eventually(t, 30*time.Second, fmt.Sprintf("x/%s (%s) leaves with the egress IP", name, ip), func() error {
				r := c.s.Probe(pod, external(ip), "80/tcp", time.Second)
				if !r.Connected || r.Reply == nil {
					return fmt.Errorf("x/%s -> %s: %s", name, external(ip), framework.Describe(r))
				}
				if got := r.Reply.Peer.Addr(); got != egressOf(ip) {
					return fmt.Errorf("x/%s -> %s: the external host saw %s, want the egress IP %s", name, external(ip), got, egressOf(ip))
				}
				return nil
			})
			// The routed network still sees the pod itself: the Egress keeps the
			// no-masquerade destinations on their usual way.
			if err := c.s.Layout.ResetExternalSeen(); err != nil {
				t.Fatal(err)
			}
			c.s.Probe(pod, routed(ip), "80/tcp", time.Second)
			c.wantSeen(t, sandbox.Seen{Source: ip, Protocol: 6})
		}
	}
	for _, name := range []string{"b", "d"} {
		pod := c.pods[name]
		for _, ip := range framework.PodIPs(pod) {
			r := c.s.Probe(pod, external(ip), "80/tcp", probeTimeout)
			node := c.nodeAddr(t, pod.Spec.NodeName, ip)
			if !r.Connected || r.Reply == nil || r.Reply.Peer.Addr() != node {
				t.Errorf("x/%s (not selected) -> %s: %s; want seen as its node %s", name, external(ip), framework.Describe(r), node)
			}
		}
	}
}

// checkEgressFailover stops the holder's agent and OVS (SIGKILL, as a lost node) and
// measures how long x/a on node1 cannot open a connection to the external host until the
// other eligible node holds the egress IP; meanwhile no connection may leave with another
// source. It leaves the holder's node down: run it last.
func (c *edges) checkEgressFailover(t *testing.T) {
	holder := c.waitHolder(t, "")
	took, failed, next := c.failover(t, holder)
	t.Logf("Egress failover %s -> %s: new connections succeed again after %s (%d failed attempts)", holder, next, took.Round(time.Millisecond), failed)
}

// failover kills holder's agent and OVS and returns how long until x/a's new connections
// reach the external host again (with the egress IP), how many attempts failed meanwhile,
// and the new holder. It fails t if any connection left with another source.
func (c *edges) failover(t testing.TB, holder string) (time.Duration, int, string) {
	a := c.pods["a"]
	ip := framework.PodIPs(a)[0]
	if r := c.s.Probe(a, external(ip), "80/tcp", probeTimeout); !r.Connected || r.Reply == nil || r.Reply.Peer.Addr() != egressOf(ip) {
		t.Fatalf("before the failover: x/a -> %s: %s", external(ip), framework.Describe(r))
	}
	if err := c.s.Layout.ResetExternalSeen(); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	for _, p := range []string{holder + "-kovs-agent", holder + "-ovs-vswitchd"} {
		if err := c.s.Layout.Kill(p); err != nil {
			t.Fatal(err)
		}
	}
	failed := 0
	for {
		if time.Since(start) > 60*time.Second {
			t.Fatalf("x/a could not reach the external host for 60s after %s stopped (%d failed attempts)", holder, failed)
		}
		r := c.s.Probe(a, external(ip), "80/tcp", failoverProbe)
		if !r.Connected {
			failed++
			continue
		}
		if r.Reply == nil || r.Reply.Peer.Addr() != egressOf(ip) {
			t.Fatalf("during the failover x/a -> %s: %s, want the egress IP %s", external(ip), framework.Describe(r), egressOf(ip))
		}
		break
	}
	took := time.Since(start)
	next := c.waitHolder(t, holder)
	seen, err := c.s.Layout.ExternalSeen()
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range seen {
		if s.Source != egressOf(ip) {
			t.Errorf("during the failover the external host saw %s, not the egress IP", s)
		}
	}
	return took, failed, next
}
