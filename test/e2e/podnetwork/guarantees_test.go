package podnetwork_test

import (
	"fmt"
	"net/netip"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/kovs-net/kovs/test/e2e/framework"
)

// checkGuarantees proves the Kubernetes network model across the cluster's nodes, for every
// address family the pods have:
//  1. the address a pod sees on its own interface is its status IP;
//  2. pods reach all pods, on the same and on other nodes, and the receiver sees the real
//     source address (no NAT);
//  3. a node reaches the pods (from one of its own addresses), and pods reach nodes with
//     their own address as the source.
func (c *cluster) checkGuarantees(t *testing.T) {
	t.Run("own interface address is the status IP", func(t *testing.T) {
		for _, p := range c.pods {
			out, err := c.s.Exec(p, "ip", "-o", "addr", "show", "dev", "eth0", "scope", "global")
			if err != nil {
				t.Fatalf("%s: %v: %s", p.Name, err, out)
			}
			for _, ip := range framework.PodIPs(p) {
				if !strings.Contains(out, " "+ip.String()+"/") {
					t.Errorf("pod %s: eth0 has %q, status IP %s is not on it", p.Name, out, ip)
				}
			}
		}
	})
	t.Run("pod to pod, same and other nodes, real source", func(t *testing.T) {
		var cases []probeCase
		for _, from := range c.pods {
			for _, to := range c.pods {
				for _, dst := range framework.PodIPs(to) {
					src, ok := sameFamily(framework.PodIPs(from), dst)
					if !ok {
						t.Fatalf("pod %s has no address of %s's family", from.Name, dst)
					}
					for _, port := range []string{"80/tcp", "81/udp", "80/sctp"} {
						cases = append(cases, probeCase{name: fmt.Sprintf("%s(%s)->%s(%s)", from.Name, from.Spec.NodeName, to.Name, to.Spec.NodeName),
							from: from, to: dst, port: port, expect: expectSource(src)})
					}
				}
			}
		}
		c.runProbes(t, cases)
	})
	t.Run("node to pod", func(t *testing.T) {
		var cases []probeCase
		for node, host := range c.hosts {
			allowed := c.nodeAddresses(t, node)
			for _, to := range c.pods {
				for _, dst := range framework.PodIPs(to) {
					cases = append(cases, probeCase{name: node + "->" + to.Name + "(" + to.Spec.NodeName + ")",
						from: host, to: dst, port: "80/tcp", expect: expectOneOf(allowed)})
				}
			}
		}
		c.runProbes(t, cases)
	})
	t.Run("pod to node, real source", func(t *testing.T) {
		var cases []probeCase
		for _, from := range c.pods {
			for node, host := range c.hosts {
				for _, dst := range framework.PodIPs(host) {
					src, ok := sameFamily(framework.PodIPs(from), dst)
					if !ok {
						continue
					}
					for _, port := range []string{fmt.Sprintf("%d/tcp", hostPort), fmt.Sprintf("%d/udp", hostPort)} {
						cases = append(cases, probeCase{name: from.Name + "(" + from.Spec.NodeName + ")->" + node,
							from: from, to: dst, port: port, expect: expectSource(src)})
					}
				}
			}
		}
		c.runProbes(t, cases)
	})
}

// checkMTU: a payload of the full pod MTU crosses nodes with DF set; one byte more is
// refused at the sender (EMSGSIZE), not silently lost on the way.
func (c *cluster) checkMTU(t *testing.T) {
	from, to := c.pods["a"], c.pods["c"]
	out, err := c.s.Exec(from, "cat", "/sys/class/net/eth0/mtu")
	if err != nil {
		t.Fatal(err)
	}
	var mtu int
	if _, err := fmt.Sscan(strings.TrimSpace(out), &mtu); err != nil {
		t.Fatalf("pod MTU %q: %v", out, err)
	}
	for _, dst := range framework.PodIPs(to) {
		header := 28 // IPv4 + ICMP
		if dst.Is6() {
			header = 48 // IPv6 + ICMPv6
		}
		full := mtu - header
		if out, err := ping(c, from, dst, full); err != nil {
			t.Errorf("full-MTU (%d) DF ping %s -> %s failed: %v\n%s", mtu, from.Name, dst, err, out)
		}
		out, err := ping(c, from, dst, full+1)
		if err == nil || !strings.Contains(out, "message too long") {
			t.Errorf("MTU+1 DF ping %s -> %s: want a local 'message too long', got err %v:\n%s", from.Name, dst, err, out)
		}
	}
	t.Logf("pod MTU %d (uplink 1500 minus the Geneve overhead)", mtu)
}

func ping(c *cluster, from *corev1.Pod, dst netip.Addr, size int) (string, error) {
	args := []string{"ping", "-c", "1", "-W", "2", "-M", "do", "-s", fmt.Sprint(size), dst.String()}
	if dst.Is6() {
		args = append([]string{"ping", "-6"}, args[1:]...)
	}
	return c.s.Exec(from, args...)
}
