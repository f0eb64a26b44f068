package services_test

import (
	"net/netip"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/kovs-net/kovs/test/e2e/framework"
)

// testInternalTrafficPolicyLocal: with internalTrafficPolicy Local a pod reaches only the
// backends on its own node, and a pod on a node without one reaches none.
func (c *svcCluster) testInternalTrafficPolicyLocal(t *testing.T) {
	ns := c.namespace(t, "itp")
	labels := map[string]string{"app": "loc"}
	ports := []corev1.ContainerPort{{ContainerPort: 8080, Protocol: corev1.ProtocolTCP}}
	pods := c.createPods(t,
		framework.PodSpec{Namespace: ns, Name: "loc-1", Node: "node1", Labels: labels, Ports: ports},
		framework.PodSpec{Namespace: ns, Name: "loc-2", Node: "node2", Labels: labels, Ports: ports})
	svc := c.service(t, ns, "loc", labels, []corev1.ServicePort{svcPort("http", 80, intstr.FromInt32(8080), corev1.ProtocolTCP)},
		func(s *corev1.Service) {
			local := corev1.ServiceInternalTrafficPolicyLocal
			s.Spec.InternalTrafficPolicy = &local
		})
	c.s.WaitEndpoints(t, ns, "loc", podNames(pods), programTimeout)
	ip := framework.ClusterIPs(svc)[0]
	for i, node := range []string{"node1", "node2"} {
		from := c.client(node)
		c.waitAnswered(t, from, ip, "80/tcp", "ClusterIP with internalTrafficPolicy Local")
		framework.Eventually(t, programTimeout, "only the backend on "+node+" to answer "+from.Name, func() error {
			return onlyFrom(c.s.Spread(from, ip, "80/tcp", 10, probeTimeout), key(pods[i]))
		})
		if err := onlyFrom(c.s.Spread(from, ip, "80/tcp", 30, probeTimeout), key(pods[i])); err != nil {
			t.Errorf("internalTrafficPolicy Local from %s (%s): %v", from.Name, node, err)
		}
	}
	from := c.client("node3")
	for range 3 {
		if r := c.s.ProbeFrom(from, ip, "80/tcp", probeTimeout); r.Connected {
			t.Errorf("internalTrafficPolicy Local: %s on node3, which has no backend, connected: %s", from.Name, framework.Describe(r))
			break
		}
	}
}

// nodePortService is a NodePort Service in the web namespace (80/tcp to 8080, 53/udp to
// 5353) selecting the three backends.
func (c *svcCluster) nodePortService(t *testing.T, name string, mutate func(*corev1.Service)) (*corev1.Service, int32, int32) {
	t.Helper()
	svc := c.webService(t, name, func(s *corev1.Service) {
		s.Spec.Type = corev1.ServiceTypeNodePort
		if mutate != nil {
			mutate(s)
		}
	}, svcPort("http", 80, intstr.FromInt32(8080), corev1.ProtocolTCP), svcPort("dns", 53, intstr.FromInt32(5353), corev1.ProtocolUDP))
	return svc, nodePort(t, svc, "http"), nodePort(t, svc, "dns")
}

// nodeIP is the node's address of like's family.
func (c *svcCluster) nodeIP(t *testing.T, node string, like netip.Addr) netip.Addr {
	for _, a := range c.s.NodeIPs(t, node) {
		if a.Is4() == like.Is4() {
			return a
		}
	}
	t.Fatalf("node %s has no address of %s's family", node, like)
	return netip.Addr{}
}

// testNodePortFromOwnNode: every node reaches a NodePort on its own address, TCP and UDP.
func (c *svcCluster) testNodePortFromOwnNode(t *testing.T) {
	svc, tcp, udp := c.nodePortService(t, "np-own", nil)
	like := framework.ClusterIPs(svc)[0]
	for _, node := range nodeNames {
		from := c.s.NodeClient(t, node)
		dst := c.nodeIP(t, node, like)
		for _, p := range []string{port(tcp, corev1.ProtocolTCP), port(udp, corev1.ProtocolUDP)} {
			r := c.waitAnswered(t, from, dst, p, "NodePort from the node itself")
			if !slices.Contains(podKeys(c.web...), r.Reply.Identity) {
				t.Errorf("%s from %s answered by %s, not a backend", target(dst, p), node, r.Reply.Identity)
			}
		}
	}
}

// testNodePortFromOtherNode: other nodes and a host outside the cluster reach node1's
// NodePort, TCP and UDP, and new connections spread over the backends of every node.
func (c *svcCluster) testNodePortFromOtherNode(t *testing.T) {
	svc, tcp, udp := c.nodePortService(t, "np-other", nil)
	like := framework.ClusterIPs(svc)[0]
	dst := c.nodeIP(t, "node1", like)
	froms := []framework.Client{c.s.NodeClient(t, "node2"), c.s.NodeClient(t, "node3"), c.s.ExternalClient(t)}
	for _, from := range froms {
		for _, p := range []string{port(tcp, corev1.ProtocolTCP), port(udp, corev1.ProtocolUDP)} {
			c.waitAnswered(t, from, dst, p, "NodePort of node1 from "+from.Name)
		}
	}
	p := port(tcp, corev1.ProtocolTCP)
	a := c.s.Spread(froms[0], dst, p, spreadProbes, probeTimeout)
	t.Logf("%s from node2: %s", target(dst, p), a)
	if err := allOf(a, podKeys(c.web...)...); err != nil {
		t.Errorf("NodePort (externalTrafficPolicy Cluster) from node2 to node1: %v", err)
	}
}

// testExternalTrafficPolicyLocal: with externalTrafficPolicy Local a NodePort reaches the
// node's own backend with the client's source address preserved, and a node without a
// backend does not forward.
func (c *svcCluster) testExternalTrafficPolicyLocal(t *testing.T) {
	ns := c.namespace(t, "etp")
	labels := map[string]string{"app": "etp"}
	pods := c.createPods(t, framework.PodSpec{Namespace: ns, Name: "etp-1", Node: "node1", Labels: labels,
		Ports: []corev1.ContainerPort{{ContainerPort: 8080, Protocol: corev1.ProtocolTCP}, {ContainerPort: 5353, Protocol: corev1.ProtocolUDP}}})
	svc := c.service(t, ns, "etp", labels, []corev1.ServicePort{
		svcPort("http", 80, intstr.FromInt32(8080), corev1.ProtocolTCP),
		svcPort("dns", 53, intstr.FromInt32(5353), corev1.ProtocolUDP)}, func(s *corev1.Service) {
		s.Spec.Type = corev1.ServiceTypeNodePort
		s.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal
	})
	c.s.WaitEndpoints(t, ns, "etp", podNames(pods), programTimeout)
	like := framework.ClusterIPs(svc)[0]
	node1 := c.nodeIP(t, "node1", like)
	ports := []string{port(nodePort(t, svc, "http"), corev1.ProtocolTCP), port(nodePort(t, svc, "dns"), corev1.ProtocolUDP)}
	for _, from := range []framework.Client{c.s.ExternalClient(t), c.s.NodeClient(t, "node2")} {
		for _, p := range ports {
			r := c.waitAnswered(t, from, node1, p, "NodePort with externalTrafficPolicy Local from "+from.Name)
			if r.Reply.Identity != key(pods[0]) {
				t.Errorf("%s from %s answered by %s, want the node's own backend %s", target(node1, p), from.Name, r.Reply.Identity, key(pods[0]))
			}
			if want := addrOf(from, node1); r.Reply.Peer.Addr() != want {
				t.Errorf("externalTrafficPolicy Local: %s from %s: the backend saw source %s, want the client's own address %s",
					target(node1, p), from.Name, r.Reply.Peer.Addr(), want)
			}
		}
	}
	// node2 has no backend of the Service: its NodePort must not forward elsewhere.
	node2 := c.nodeIP(t, "node2", like)
	ext := c.s.ExternalClient(t)
	for _, p := range ports {
		if r := c.s.ProbeFrom(ext, node2, p, probeTimeout); r.Connected {
			t.Errorf("externalTrafficPolicy Local: %s (node2 has no backend) from outside connected: %s", target(node2, p), framework.Describe(r))
		}
	}
}

// testDualStackClusterIP: a RequireDualStack Service answers on its IPv4 and its IPv6
// ClusterIP, TCP and UDP, with the client's own address of each family as the source.
func (c *svcCluster) testDualStackClusterIP(t *testing.T) {
	svc := c.webService(t, "dual", func(s *corev1.Service) {
		policy := corev1.IPFamilyPolicyRequireDualStack
		s.Spec.IPFamilyPolicy = &policy
	}, svcPort("http", 80, intstr.FromInt32(8080), corev1.ProtocolTCP), svcPort("dns", 53, intstr.FromInt32(5353), corev1.ProtocolUDP))
	ips := framework.ClusterIPs(svc)
	if len(ips) != 2 {
		t.Fatalf("RequireDualStack Service has ClusterIPs %v, want one per family", ips)
	}
	for _, ip := range ips {
		t.Run(ip.String(), func(t *testing.T) {
			c.checkClusterIP(t, "80/tcp", "8080/tcp", ip)
			c.checkClusterIP(t, "53/udp", "5353/udp", ip)
		})
	}
}

// testDualStackNodePort: a RequireDualStack NodePort answers on node1's IPv4 and IPv6
// addresses from node2.
func (c *svcCluster) testDualStackNodePort(t *testing.T) {
	svc, tcp, udp := c.nodePortService(t, "dual-np", func(s *corev1.Service) {
		policy := corev1.IPFamilyPolicyRequireDualStack
		s.Spec.IPFamilyPolicy = &policy
	})
	from := c.s.NodeClient(t, "node2")
	for _, like := range framework.ClusterIPs(svc) {
		dst := c.nodeIP(t, "node1", like)
		for _, p := range []string{port(tcp, corev1.ProtocolTCP), port(udp, corev1.ProtocolUDP)} {
			c.waitAnswered(t, from, dst, p, "dual-stack NodePort")
		}
	}
}
