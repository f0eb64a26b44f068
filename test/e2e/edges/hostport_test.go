package edges_test

import (
	"net/netip"
	"strconv"
	"testing"

	"github.com/kovs-net/kovs/test/e2e/framework"
)

// hostPort is x/hp's hostPort (TCP and UDP) on node1, mapped to its port 80.
const hostPort = 8080

// checkHostPort: x/hp answers on node1's addresses at its hostPort, over TCP and UDP,
// from another node, from the external host and from node1 itself (and, IPv4, at
// node1's 127.0.0.1). Each cell of the matrix is logged with the source the pod saw.
func (c *edges) checkHostPort(t *testing.T) {
	type from struct {
		client framework.Client
		local  bool // connects to 127.0.0.1 instead of the node address
	}
	froms := []from{{client: c.s.NodeClient(t, "node2")}, {client: c.ext}, {client: c.s.NodeClient(t, "node1")},
		{client: c.s.NodeClient(t, "node1"), local: true}}
	for _, node1 := range c.s.NodeIPs(t, "node1") {
		for _, f := range froms {
			to := node1
			if f.local {
				if node1.Is6() {
					continue // portmap maps ::1 nowhere: IPv6 has no route_localnet
				}
				to = netip.MustParseAddr("127.0.0.1")
			}
			for _, proto := range []string{"tcp", "udp"} {
				port := strconv.Itoa(hostPort) + "/" + proto
				r := c.s.ProbeFrom(f.client, to, port, probeTimeout)
				if !r.Connected || r.Reply == nil || r.Reply.Identity != "x/hp" {
					t.Errorf("hostPort %s:%s from %s: %s", to, port, f.client.Name, framework.Describe(r))
					continue
				}
				t.Logf("hostPort matrix: from %-8s to %s:%s -> x/hp saw source %s", f.client.Name, to, port, r.Reply.Peer.Addr())
			}
		}
	}
}
