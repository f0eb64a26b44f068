package services_test

import (
	"fmt"
	"net/netip"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/kovs-net/kovs/test/e2e/framework"
)

// testHostNetworkEndpointsEverywhere is the upstream "Networking Granular Checks: Services
// should function for service endpoints using hostNetwork": a NodePort Service whose
// endpoints are hostNetwork pods on every node (so node addresses, one of them the
// client's own), reached from the nodes themselves (hostNetwork clients) and from a pod,
// on its ClusterIP and on a node's NodePort, TCP and UDP; new connections must reach every
// endpoint, and a UDP datagram sent in fragments must be answered.
func (c *svcCluster) testHostNetworkEndpointsEverywhere(t *testing.T) {
	ns := c.namespace(t, "hostnet-all")
	var specs []framework.PodSpec
	for i, node := range nodeNames {
		specs = append(specs, framework.PodSpec{Namespace: ns, Name: fmt.Sprintf("hn-%d", i+1), Node: node, HostNetwork: true,
			Labels: map[string]string{"app": "hostnet-all"}, Ports: []corev1.ContainerPort{
				{ContainerPort: 8083, Protocol: corev1.ProtocolTCP}, {ContainerPort: 8084, Protocol: corev1.ProtocolUDP}}})
	}
	pods := c.createPods(t, specs...)
	svc := c.service(t, ns, "hostnet-all", map[string]string{"app": "hostnet-all"}, []corev1.ServicePort{
		svcPort("http", 80, intstr.FromInt32(8083), corev1.ProtocolTCP),
		svcPort("udp", 90, intstr.FromInt32(8084), corev1.ProtocolUDP)},
		func(s *corev1.Service) { s.Spec.Type = corev1.ServiceTypeNodePort })
	c.s.WaitEndpoints(t, ns, svc.Name, podNames(pods), programTimeout)
	ip := framework.ClusterIPs(svc)[0]
	node1 := c.nodeIP(t, "node1", ip)
	targets := []struct {
		addr netip.Addr
		port string
	}{
		{ip, "80/tcp"}, {ip, "90/udp"},
		{node1, port(nodePort(t, svc, "http"), corev1.ProtocolTCP)}, {node1, port(nodePort(t, svc, "udp"), corev1.ProtocolUDP)},
	}
	froms := []framework.Client{c.s.NodeClient(t, "node1"), c.s.NodeClient(t, "node2"), c.client("node1")}
	for _, from := range froms {
		for _, to := range targets {
			t.Run(from.Name+"/"+target(to.addr, to.port), func(t *testing.T) {
				c.waitAnswered(t, from, to.addr, to.port, "a Service with hostNetwork endpoints")
				if err := allOf(c.s.Spread(from, to.addr, to.port, spreadProbes, probeTimeout), podKeys(pods...)...); err != nil {
					t.Errorf("%s from %s: %v", target(to.addr, to.port), from.Name, err)
				}
			})
		}
		// Upstream's last step: a 2,000-byte UDP message, sent in fragments.
		t.Run(from.Name+"/fragmented", func(t *testing.T) {
			c.checkBigDatagrams(t, from, ip, 90, podKeys(pods...))
			c.checkBigDatagrams(t, from, node1, uint16(nodePort(t, svc, "udp")), podKeys(pods...))
		})
	}
}
