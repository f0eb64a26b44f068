package edges_test

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kovs-net/kovs/go-controller/pkg/sandbox"
	"github.com/kovs-net/kovs/test/e2e/framework"
)

// checkMasquerade: every pod on every node reaches the external host over TCP, UDP and
// ICMP, and the external host sees the pod's node, never the pod.
func (c *edges) checkMasquerade(t *testing.T) {
	if err := c.s.Layout.ResetExternalSeen(); err != nil {
		t.Fatal(err)
	}
	var podIPs []netip.Addr
	for _, name := range []string{"a", "b", "c", "d"} {
		pod := c.pods[name]
		for _, ip := range framework.PodIPs(pod) {
			podIPs = append(podIPs, ip)
			node := c.nodeAddr(t, pod.Spec.NodeName, ip)
			for _, port := range []string{"80/tcp", "80/udp"} {
				r := c.s.Probe(pod, external(ip), port, probeTimeout)
				if !r.Connected || r.Reply == nil || r.Reply.Identity != sandbox.ExternalIdentity {
					t.Errorf("%s (%s) -> external %s %s: %s", name, ip, external(ip), port, framework.Describe(r))
					continue
				}
				if got := r.Reply.Peer.Addr(); got != node {
					t.Errorf("%s (%s) -> external %s: the external host saw %s, want the node's address %s", name, ip, port, got, node)
				}
			}
			if out, err := c.s.Exec(pod, "ping", "-c", "1", "-W", "2", external(ip).String()); err != nil {
				t.Errorf("%s (%s): ping external %s: %v\n%s", name, ip, external(ip), err, out)
			}
			c.wantSeen(t, sandbox.Seen{Source: node, Protocol: icmpOf(ip)})
		}
	}
	seen := c.seen(t)
	for _, s := range seen {
		if slices.Contains(podIPs, s.Source) {
			t.Errorf("the external host saw a pod address: %s (all seen: %v)", s, seen)
		}
	}
}

// checkNoMasquerade: traffic to a destination in --no-masquerade-cidrs leaves with the
// pod's own address (the external host, with no route to the pods, cannot answer it).
func (c *edges) checkNoMasquerade(t *testing.T) {
	if err := c.s.Layout.ResetExternalSeen(); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"a", "c"} {
		pod := c.pods[name]
		for _, ip := range framework.PodIPs(pod) {
			if r := c.s.Probe(pod, routed(ip), "80/tcp", time.Second); r.Connected {
				t.Errorf("%s -> %s: connected (%s): the external host has no route to pods, so the source was translated",
					name, routed(ip), framework.Describe(r))
			}
			c.wantSeen(t, sandbox.Seen{Source: ip, Protocol: 6})
			if node := c.nodeAddr(t, pod.Spec.NodeName, ip); slices.Contains(c.seen(t), sandbox.Seen{Source: node, Protocol: 6}) {
				t.Errorf("%s -> %s: the external host saw the node address %s", name, routed(ip), node)
			}
		}
	}
}

// checkEgressPolicy: an egress rule allowing everything except the external host's
// address blocks x/a from it (the rule judges a's own connection, before the node
// translates it), leaves a's traffic to the routed address alone, and does not touch x/b
// on the same node.
func (c *edges) checkEgressPolicy(t *testing.T) {
	var blocks []string
	for _, ip := range framework.PodIPs(c.pods["a"]) {
		all, bits := "0.0.0.0/0", 32
		if ip.Is6() {
			all, bits = "::/0", 128
		}
		blocks = append(blocks, fmt.Sprintf("    - to: [{ipBlock: {cidr: %q, except: [%q]}}]", all, netip.PrefixFrom(external(ip), bits)))
	}
	c.s.Apply(`apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: no-external, namespace: x}
spec:
  podSelector: {matchLabels: {pod: a}}
  policyTypes: [Egress]
  egress:
` + strings.Join(blocks, "\n") + "\n")
	a, b := c.pods["a"], c.pods["b"]
	for _, ip := range framework.PodIPs(a) {
		framework.Eventually(t, 30*time.Second, "x/a cut off from the external host", func() error {
			if r := c.s.Probe(a, external(ip), "80/tcp", time.Second); r.Connected {
				return fmt.Errorf("x/a -> %s: %s", external(ip), framework.Describe(r))
			}
			return nil
		})
		if err := c.s.Layout.ResetExternalSeen(); err != nil {
			t.Fatal(err)
		}
		c.s.Probe(a, routed(ip), "80/tcp", time.Second)
		c.wantSeen(t, sandbox.Seen{Source: ip, Protocol: 6})
	}
	for _, ip := range framework.PodIPs(b) {
		if r := c.s.Probe(b, external(ip), "80/tcp", probeTimeout); !r.Connected {
			t.Errorf("x/b (not selected) -> %s: %s", external(ip), framework.Describe(r))
		}
	}
	if out, err := c.s.Kubectl("-n", "x", "delete", "networkpolicy", "no-external"); err != nil {
		t.Fatalf("delete policy: %v\n%s", err, out)
	}
	for _, ip := range framework.PodIPs(a) {
		framework.Eventually(t, 30*time.Second, "x/a reaches the external host again", func() error {
			if r := c.s.Probe(a, external(ip), "80/tcp", time.Second); !r.Connected {
				return fmt.Errorf("x/a -> %s: %s", external(ip), framework.Describe(r))
			}
			return nil
		})
	}
}

func (c *edges) seen(t *testing.T) []sandbox.Seen {
	t.Helper()
	seen, err := c.s.Layout.ExternalSeen()
	if err != nil {
		t.Fatal(err)
	}
	return seen
}

// wantSeen fails unless the external host's witness recorded s.
func (c *edges) wantSeen(t *testing.T, s sandbox.Seen) {
	t.Helper()
	if seen := c.seen(t); !slices.Contains(seen, s) {
		t.Errorf("the external host saw no packet from %s (protocol %d); it saw %v", s.Source, s.Protocol, seen)
	}
}

func icmpOf(ip netip.Addr) uint8 {
	if ip.Is6() {
		return 58
	}
	return 1
}
