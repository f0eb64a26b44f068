package services_test

import (
	"fmt"
	"net/netip"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/kovs-net/kovs/test/e2e/framework"
)

// checkClusterIP probes a Service port from the client on node3 and checks that one of
// the web backends answers on targetPort and saw the client's own address (pod to
// ClusterIP is not masqueraded, so NetworkPolicy sees the real client).
func (c *svcCluster) checkClusterIP(t *testing.T, svcPortSpec, targetPort string, svcIP netip.Addr) {
	t.Helper()
	from := c.client("node3")
	r := c.waitAnswered(t, from, svcIP, svcPortSpec, "ClusterIP")
	if !slices.Contains(podKeys(c.web...), r.Reply.Identity) {
		t.Errorf("%s answered by %s, not one of the Service's backends %v", target(svcIP, svcPortSpec), r.Reply.Identity, podKeys(c.web...))
	}
	if r.Reply.Port.String() != targetPort {
		t.Errorf("%s reached the backend on %s, want targetPort %s", target(svcIP, svcPortSpec), r.Reply.Port, targetPort)
	}
	if want := addrOf(from, svcIP); r.Reply.Peer.Addr() != want {
		t.Errorf("%s: backend saw source %s, want the client pod's own address %s (pod to ClusterIP is not masqueraded)",
			target(svcIP, svcPortSpec), r.Reply.Peer.Addr(), want)
	}
}

func (c *svcCluster) testClusterIPTCP(t *testing.T) {
	svc := c.webService(t, "tcp", nil, svcPort("http", 80, intstr.FromInt32(8080), corev1.ProtocolTCP))
	c.checkClusterIP(t, "80/tcp", "8080/tcp", framework.ClusterIPs(svc)[0])
}

func (c *svcCluster) testClusterIPUDP(t *testing.T) {
	svc := c.webService(t, "udp", nil, svcPort("dns", 53, intstr.FromInt32(5353), corev1.ProtocolUDP))
	c.checkClusterIP(t, "53/udp", "5353/udp", framework.ClusterIPs(svc)[0])
}

// testClusterIPSCTP: an SCTP ClusterIP reaches a backend on its targetPort, and new
// associations spread over all backends, local and remote. On the userspace datapath the
// sandbox runs, OVS's conntrack cannot translate SCTP ports, so kovs translates SCTP
// statelessly (docs/services.md); an association only comes up if the backend's answers
// are rewritten back to come from the ClusterIP.
func (c *svcCluster) testClusterIPSCTP(t *testing.T) {
	svc := c.webService(t, "sctp", nil, svcPort("sctp", 132, intstr.FromInt32(9132), corev1.ProtocolSCTP))
	ip := framework.ClusterIPs(svc)[0]
	c.checkClusterIP(t, "132/sctp", "9132/sctp", ip)
	from := c.client("node1")
	want := podKeys(c.web...)
	seen := map[string]bool{}
	for i := 0; i < 60 && len(seen) < len(want); i++ {
		r := c.s.ProbeFrom(from, ip, "132/sctp", probeTimeout)
		if !r.Connected {
			t.Fatalf("association %d to %s: %s", i, target(ip, "132/sctp"), framework.Describe(r))
		}
		if r.Reply.Port.String() != "9132/sctp" || r.Reply.Peer.Addr() != addrOf(from, ip) {
			t.Errorf("association %d: backend %s saw port %s and peer %s, want 9132/sctp and the client's own address",
				i, r.Reply.Identity, r.Reply.Port, r.Reply.Peer)
		}
		seen[r.Reply.Identity] = true
	}
	for _, w := range want {
		if !seen[w] {
			t.Errorf("no SCTP association from node1 reached backend %s (reached %v)", w, seen)
		}
	}
}

// testMultiplePorts: one Service, three ports, two protocols, each to its own targetPort
// (by name for one of them); a port the Service does not have is not answered.
func (c *svcCluster) testMultiplePorts(t *testing.T) {
	svc := c.webService(t, "multi", nil,
		svcPort("http", 80, intstr.FromInt32(8080), corev1.ProtocolTCP),
		svcPort("alt", 81, intstr.FromString("alt"), corev1.ProtocolTCP),
		svcPort("dns", 53, intstr.FromInt32(5353), corev1.ProtocolUDP))
	ip := framework.ClusterIPs(svc)[0]
	for _, pc := range []struct{ port, target string }{{"80/tcp", "8080/tcp"}, {"81/tcp", "8081/tcp"}, {"53/udp", "5353/udp"}} {
		t.Run(pc.port, func(t *testing.T) { c.checkClusterIP(t, pc.port, pc.target, ip) })
	}
	// 82/tcp is no port of the Service: it must not reach a backend (on any port).
	if r := c.s.ProbeFrom(c.client("node3"), ip, "82/tcp", probeTimeout); r.Connected {
		t.Errorf("%s is not a port of the Service but connected: %s", target(ip, "82/tcp"), framework.Describe(r))
	}
}

// testNamedTargetPort: targetPort "web" is 8080 on one backend and 9090 on the other; each
// backend must be reached on its own number.
func (c *svcCluster) testNamedTargetPort(t *testing.T) {
	ns := c.namespace(t, "named")
	pods := c.createPods(t,
		framework.PodSpec{Namespace: ns, Name: "named-a", Node: "node1", Labels: map[string]string{"app": "named"},
			Ports: []corev1.ContainerPort{{Name: "web", ContainerPort: 8080, Protocol: corev1.ProtocolTCP}}},
		framework.PodSpec{Namespace: ns, Name: "named-b", Node: "node2", Labels: map[string]string{"app": "named"},
			Ports: []corev1.ContainerPort{{Name: "web", ContainerPort: 9090, Protocol: corev1.ProtocolTCP}}})
	svc := c.service(t, ns, "named", map[string]string{"app": "named"},
		[]corev1.ServicePort{svcPort("http", 80, intstr.FromString("web"), corev1.ProtocolTCP)}, nil)
	c.s.WaitEndpoints(t, ns, "named", podNames(pods), programTimeout)
	ip := framework.ClusterIPs(svc)[0]
	from := c.client("node3")
	c.waitAnswered(t, from, ip, "80/tcp", "ClusterIP with a named targetPort")
	a := c.s.Spread(from, ip, "80/tcp", spreadProbes, probeTimeout)
	if err := allOf(a, podKeys(pods...)...); err != nil {
		t.Errorf("named targetPort %q resolved per backend: %v", "web", err)
	}
	want := map[string]string{key(pods[0]): "8080/tcp", key(pods[1]): "9090/tcp"}
	for _, r := range a.Results {
		if r.Reply != nil && r.Reply.Port.String() != want[r.Reply.Identity] {
			t.Errorf("backend %s reached on %s, but its container port named web is %s", r.Reply.Identity, r.Reply.Port, want[r.Reply.Identity])
			break
		}
	}
}

// testSpread: new connections, TCP and UDP, reach every backend (on three nodes).
func (c *svcCluster) testSpread(t *testing.T) {
	svc := c.webService(t, "spread", nil,
		svcPort("http", 80, intstr.FromInt32(8080), corev1.ProtocolTCP),
		svcPort("dns", 53, intstr.FromInt32(5353), corev1.ProtocolUDP))
	ip := framework.ClusterIPs(svc)[0]
	from := c.client("node1")
	for _, p := range []string{"80/tcp", "53/udp"} {
		c.waitAnswered(t, from, ip, p, "ClusterIP")
		a := c.s.Spread(from, ip, p, spreadProbes, probeTimeout)
		t.Logf("%s: %s", target(ip, p), a)
		if err := allOf(a, podKeys(c.web...)...); err != nil {
			t.Errorf("%d new %s connections from one client to %s: %v", spreadProbes, p, target(ip, p), err)
		}
	}
}

// testNoEndpointsRejects: a Service whose selector matches no pod answers a TCP SYN with
// a reset and a UDP datagram with ICMP port unreachable, at once, instead of letting the
// client time out.
func (c *svcCluster) testNoEndpointsRejects(t *testing.T) {
	ns := c.namespace(t, "empty")
	svc := c.service(t, ns, "empty", map[string]string{"app": "nothing"}, []corev1.ServicePort{
		svcPort("http", 80, intstr.FromInt32(8080), corev1.ProtocolTCP),
		svcPort("dns", 53, intstr.FromInt32(5353), corev1.ProtocolUDP),
		svcPort("sctp", 132, intstr.FromInt32(9132), corev1.ProtocolSCTP)}, nil)
	ip := framework.ClusterIPs(svc)[0]
	from := c.client("node2")
	const fast = time.Second
	for _, p := range []string{"80/tcp", "53/udp", "132/sctp"} {
		t.Run(p, func(t *testing.T) {
			framework.Eventually(t, programTimeout, target(ip, p)+" of a Service without endpoints to be rejected", func() error {
				r := c.s.ProbeFrom(from, ip, p, 3*time.Second)
				if !r.Refused {
					return fmt.Errorf("after %s: %s (want a TCP reset or ICMP unreachable)", r.Duration.Round(time.Millisecond), framework.Describe(r))
				}
				return nil
			})
			// Linux sends ICMP errors to one peer at most once a second after a burst of 6
			// (net.ipv4.icmp_ratelimit, as for kube-proxy's REJECT): the probes are spaced
			// so each may get its own.
			for range 5 {
				time.Sleep(1100 * time.Millisecond)
				r := c.s.ProbeFrom(from, ip, p, 3*time.Second)
				if !r.Refused || r.Duration > fast {
					t.Errorf("%s without endpoints: %s after %s, want refused within %s",
						target(ip, p), framework.Describe(r), r.Duration.Round(time.Millisecond), fast)
				}
			}
		})
	}
}

// testUnknownPortRejects: a connection to a ClusterIP on a port that is no port of its
// Service is refused (TCP reset, ICMP port unreachable), from a pod and from a node,
// instead of circling between br-int and the host until it times out.
func (c *svcCluster) testUnknownPortRejects(t *testing.T) {
	svc := c.webService(t, "unknown-port", nil, svcPort("http", 80, intstr.FromInt32(8080), corev1.ProtocolTCP))
	ip := framework.ClusterIPs(svc)[0]
	c.waitAnswered(t, c.client("node1"), ip, "80/tcp", "ClusterIP")
	for _, from := range []framework.Client{c.client("node1"), c.s.NodeClient(t, "node2")} {
		for _, p := range []string{"8099/tcp", "8099/udp"} {
			framework.Eventually(t, programTimeout, target(ip, p)+" (no Service port) from "+from.Name+" to be rejected", func() error {
				r := c.s.ProbeFrom(from, ip, p, 3*time.Second)
				if !r.Refused {
					return fmt.Errorf("after %s: %s (want a TCP reset or ICMP unreachable)", r.Duration.Round(time.Millisecond), framework.Describe(r))
				}
				return nil
			})
		}
	}
}

// testHairpin: a pod reaches itself through its own Service, TCP and UDP.
func (c *svcCluster) testHairpin(t *testing.T) {
	ns := c.namespace(t, "hairpin")
	pods := c.createPods(t, framework.PodSpec{Namespace: ns, Name: "hp", Node: "node1", Labels: map[string]string{"app": "hp"},
		Ports: []corev1.ContainerPort{{ContainerPort: 8080, Protocol: corev1.ProtocolTCP}, {ContainerPort: 5353, Protocol: corev1.ProtocolUDP}}})
	svc := c.service(t, ns, "hp", map[string]string{"app": "hp"}, []corev1.ServicePort{
		svcPort("http", 80, intstr.FromInt32(8080), corev1.ProtocolTCP),
		svcPort("dns", 53, intstr.FromInt32(5353), corev1.ProtocolUDP)}, nil)
	c.s.WaitEndpoints(t, ns, "hp", podNames(pods), programTimeout)
	ip := framework.ClusterIPs(svc)[0]
	self := c.s.PodClient(pods[0])
	for _, p := range []string{"80/tcp", "53/udp"} {
		r := c.waitAnswered(t, self, ip, p, "hairpin (a pod through its own Service)")
		if r.Reply.Identity != key(pods[0]) {
			t.Errorf("hairpin %s answered by %s, want the pod itself", target(ip, p), r.Reply.Identity)
		}
		t.Logf("hairpin %s: the pod saw source %s", target(ip, p), r.Reply.Peer)
	}
}

// testClusterIPFromNode: the nodes themselves (host daemons, hostNetwork pods) reach a
// ClusterIP, TCP and UDP.
func (c *svcCluster) testClusterIPFromNode(t *testing.T) {
	svc := c.webService(t, "from-node", nil,
		svcPort("http", 80, intstr.FromInt32(8080), corev1.ProtocolTCP),
		svcPort("dns", 53, intstr.FromInt32(5353), corev1.ProtocolUDP))
	ip := framework.ClusterIPs(svc)[0]
	for _, node := range nodeNames {
		from := c.s.NodeClient(t, node)
		for _, p := range []string{"80/tcp", "53/udp"} {
			r := c.waitAnswered(t, from, ip, p, "ClusterIP from the node")
			if !slices.Contains(podKeys(c.web...), r.Reply.Identity) {
				t.Errorf("%s from %s answered by %s, not a backend", target(ip, p), node, r.Reply.Identity)
			}
		}
	}
}

// testHostNetworkEndpoint: a Service whose backend is a hostNetwork pod (its endpoint is
// a node address, as for default/kubernetes or a node-local daemon) is reached from pods
// and from the nodes, its own node included.
func (c *svcCluster) testHostNetworkEndpoint(t *testing.T) {
	ns := c.namespace(t, "hostnet")
	pods := c.createPods(t, framework.PodSpec{Namespace: ns, Name: "host-backend", Node: "node1", HostNetwork: true,
		Labels: map[string]string{"app": "hostnet"}, Ports: []corev1.ContainerPort{{ContainerPort: 8082, Protocol: corev1.ProtocolTCP}}})
	svc := c.service(t, ns, "hostnet", map[string]string{"app": "hostnet"},
		[]corev1.ServicePort{svcPort("http", 80, intstr.FromInt32(8082), corev1.ProtocolTCP)}, nil)
	c.s.WaitEndpoints(t, ns, "hostnet", podNames(pods), programTimeout)
	ip := framework.ClusterIPs(svc)[0]
	froms := []framework.Client{c.client("node1"), c.client("node2"), c.s.NodeClient(t, "node1"), c.s.NodeClient(t, "node2")}
	for _, from := range froms {
		t.Run(from.Name, func(t *testing.T) {
			r := c.waitAnswered(t, from, ip, "80/tcp", "ClusterIP with a hostNetwork endpoint")
			if r.Reply.Identity != key(pods[0]) {
				t.Errorf("%s answered by %s, want %s", target(ip, "80/tcp"), r.Reply.Identity, key(pods[0]))
			}
		})
	}
}
