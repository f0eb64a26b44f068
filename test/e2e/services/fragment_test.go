package services_test

import (
	"net/netip"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/kovs-net/kovs/test/e2e/framework"
)

// bigDatagram is larger than any MTU of the sandbox (pods 1450, nodes 1500): the sender
// fragments it, as upstream's Granular Checks' 2,000-byte UDP echo.
const bigDatagram = 2000

// bigDatagrams is how many fragmented datagrams, each from a new source port (a new
// connection), every client sends to every target.
const bigDatagrams = 10

// testFragmentedUDP: a UDP datagram sent in fragments reaches a backend through a
// ClusterIP and through a NodePort, from a pod, from the node itself and from another
// node. On the userspace datapath OpenFlow sees the fragments, without their port, after
// conntrack (docs/services.md).
func (c *svcCluster) testFragmentedUDP(t *testing.T) {
	svc, _, udp := c.nodePortService(t, "frag", nil)
	ip := framework.ClusterIPs(svc)[0]
	node1 := c.nodeIP(t, "node1", ip)
	for _, tc := range []struct {
		from framework.Client
		addr netip.Addr
		port uint16
	}{
		{c.client("node1"), ip, 53},
		{c.s.NodeClient(t, "node1"), ip, 53},
		{c.s.NodeClient(t, "node1"), node1, uint16(udp)},
		{c.s.NodeClient(t, "node2"), node1, uint16(udp)},
	} {
		c.checkBigDatagrams(t, tc.from, tc.addr, tc.port, podKeys(c.web...))
	}
}

// checkBigDatagrams sends bigDatagrams fragmented datagrams from client to addr:port/udp,
// once a small one is answered (the Service is programmed), and wants each answered by
// one of backends.
func (c *svcCluster) checkBigDatagrams(t *testing.T, from framework.Client, addr netip.Addr, port uint16, backends []string) {
	t.Helper()
	p := portUDP(port)
	c.waitAnswered(t, from, addr, p, "a small datagram")
	for i := range bigDatagrams {
		r := c.s.ProbeDatagramFrom(from, addr, port, bigDatagram, probeTimeout)
		if !r.Connected || r.Reply == nil {
			t.Errorf("%d-byte datagram %d of %d to %s from %s (a small one was answered): %s", bigDatagram, i+1, bigDatagrams,
				target(addr, p), from.Name, framework.Describe(r))
			continue
		}
		if !slices.Contains(backends, r.Reply.Identity) {
			t.Errorf("%d-byte datagram to %s from %s answered by %s, not a backend", bigDatagram, target(addr, p), from.Name, r.Reply.Identity)
		}
	}
}

func portUDP(n uint16) string { return port(int32(n), corev1.ProtocolUDP) }
