package podnetwork_test

import (
	"context"
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kovs-net/kovs/test/e2e/framework"
)

// reasonAddressTaken is the reason of kovs-controller's Event on a Node that claims an
// address another Node's kovs.io/node-addresses holds (pkg/controller/addresses).
const reasonAddressTaken = "NodeAddressTaken"

// checkTunnelSteering is a compromised node's attack on the tunnel peers (issue 29): root
// on node3 holds node3's kubelet credentials, which may write node3's status.addresses.
// With node3's emulated kubelet paused (so nothing writes them back), node3 claims node2's
// InternalIP:
//
//   - as a second InternalIP: node1 must not accept from node3's tunnel packets whose inner
//     source is node2's host address (the Classifier's catch-all drops them);
//   - as its first InternalIP (its tunnel endpoint): node1 must not cut node2 off (its pod
//     a still reaches node2's pod c, and node1's agent rejects no peer).
//
// Each verdict waits first for a positive sign that the claim was seen: kovs-controller's
// NodeAddressTaken Event on node3 (its refusal to record the address), or, where nothing
// refuses it, node1's br-int accepting the address from node3 (second InternalIP) or
// node1's agent rejecting a peer (first InternalIP).
func (c *cluster) checkTunnelSteering(t *testing.T) {
	ctx := context.Background()
	node2, err := c.s.Client.CoreV1().Nodes().Get(ctx, "node2", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	node3, err := c.s.Client.CoreV1().Nodes().Get(ctx, "node3", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	victim, own := internalIP(node2, true), internalIP(node3, true)
	if !victim.IsValid() || !own.IsValid() {
		t.Skip("tunnel steering runs on an IPv4 underlay")
	}
	resume := c.s.Pause(t, "node3-emulator")
	defer resume()
	kubelet := c.s.ClientAs(t, "system:node:node3", "system:nodes")
	claim := func(ips ...netip.Addr) {
		t.Helper()
		n, err := kubelet.CoreV1().Nodes().Get(ctx, "node3", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		n.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeHostName, Address: "node3"}}
		for _, ip := range ips {
			n.Status.Addresses = append(n.Status.Addresses, corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: ip.String()})
		}
		if _, err := kubelet.CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{}); err != nil {
			t.Fatalf("node3's kubelet writes its addresses %v: %v", ips, err)
		}
	}
	defer claim(own)

	// A second InternalIP: node2's host address as an inner source from node3.
	refusals := c.addressTakenEvents(t)
	claim(own, victim)
	acceptedFromNode3 := fmt.Sprintf("tun_src=%s,in_port=1,nw_src=%s ", own, victim)
	c.awaitClaimSeen(t, "node3's second InternalIP "+victim.String(), refusals, func() string {
		for _, f := range c.s.DumpFlows(t, "node1") {
			if f.Table == 0 && strings.Contains(f.Text, acceptedFromNode3) {
				return "node1 accepts it: " + f.Text
			}
		}
		return ""
	})
	target := framework.PodIPs(c.pods["a"])[0]
	const steerPort, steerCount = 86, 5
	before := c.dropped(t, "node1", classifierMiss)
	for range steerCount {
		if err := c.sendGeneve("node3", "node1", victim, target, steerPort); err != nil {
			t.Fatal(err)
		}
	}
	if entries := c.awaitVerdict(t, "node1", classifierMiss, before, steerCount, func() string {
		return c.conntrack(t, "node1", victim, target, steerPort)
	}); entries != "" {
		t.Errorf("node1 accepted from node3's tunnel a packet from node2's host address %s:\n%s", victim, entries)
	}

	// The first InternalIP: node3 poses as node2's tunnel endpoint.
	refusals = c.addressTakenEvents(t)
	claim(victim, own)
	c.awaitClaimSeen(t, "node3's first InternalIP "+victim.String(), refusals, func() string {
		if n, err := c.s.AgentMetric("node1", "kovs_agent_tunnel_peers_rejected", nil); err == nil && n > 0 {
			return fmt.Sprintf("node1's agent rejects %v peers", n)
		}
		return ""
	})
	if r := c.s.Probe(c.pods["a"], framework.PodIPs(c.pods["c"])[0], "80/tcp", 2*time.Second); !r.Connected {
		t.Errorf("node3 claiming node2's address cut node2 off: node1's pod a -> node2's pod c: %s", framework.Describe(r))
	}
	if n, err := c.s.AgentMetric("node1", "kovs_agent_tunnel_peers_rejected", nil); err != nil || n != 0 {
		t.Errorf("node1's agent rejects %v tunnel peers (%v), want none", n, err)
	}
}

// addressTakenEvents counts kovs-controller's NodeAddressTaken Events on node3 so far
// (an Event repeated is one object with a higher count).
func (c *cluster) addressTakenEvents(t *testing.T) int32 {
	t.Helper()
	list, err := c.s.Client.CoreV1().Events("").List(context.Background(), metav1.ListOptions{
		FieldSelector: "involvedObject.kind=Node,involvedObject.name=node3,reason=" + reasonAddressTaken})
	if err != nil {
		t.Fatal(err)
	}
	var n int32
	for _, e := range list.Items {
		n += max(e.Count, 1)
	}
	return n
}

// awaitClaimSeen waits until node3's claim was refused (a NodeAddressTaken Event more than
// before) or took effect (taken reports how), and logs which.
func (c *cluster) awaitClaimSeen(t *testing.T, what string, before int32, taken func() string) {
	t.Helper()
	framework.Eventually(t, 30*time.Second, what+" refused by kovs-controller or in effect on node1", func() error {
		if c.addressTakenEvents(t) > before {
			t.Logf("%s: refused by kovs-controller (%s Event)", what, reasonAddressTaken)
			return nil
		}
		if how := taken(); how != "" {
			t.Logf("%s: in effect, %s", what, how)
			return nil
		}
		return fmt.Errorf("neither yet")
	})
}
