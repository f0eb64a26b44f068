package services_test

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/kovs-net/kovs/go-controller/pkg/agent"
)

// testProxyHealthURL: every node answers kube-proxy's health URL, http://<node>:10256/healthz
// (and /livez), with 200 and kube-proxy's JSON body, on loopback and on its address from
// another node (where cloud load balancers probe it), and /proxyMode on loopback port 10249.
func (c *svcCluster) testProxyHealthURL(t *testing.T) {
	for i, node := range nodeNames {
		other := nodeNames[(i+1)%len(nodeNames)]
		addr := c.nodeIP(t, node, netip.IPv4Unspecified()) // TestServicesIPv4
		for _, probe := range []struct{ from, url string }{
			{node, "http://127.0.0.1:10256/healthz"},
			{node, "http://127.0.0.1:10256/livez"},
			{other, "http://" + netip.AddrPortFrom(addr, 10256).String() + "/healthz"},
		} {
			out := inNode(t, c.s.Layout.NodeNetNS(probe.from), "curl", "-sS", "-i", "--max-time", "5", probe.url)
			if !strings.HasPrefix(out, "HTTP/1.1 200 OK") || !strings.Contains(out, `"lastUpdated"`) {
				t.Errorf("%s from %s: want 200 with lastUpdated in a JSON body, got:\n%s", probe.url, probe.from, out)
			}
		}
		// kube-proxy's metrics port, loopback only: the upstream "should check kube-proxy
		// urls" asks it for the proxy mode.
		url := "http://127.0.0.1:10249/proxyMode"
		if out := inNode(t, c.s.Layout.NodeNetNS(node), "curl", "-sS", "-i", "--max-time", "5", url); !strings.HasPrefix(out, "HTTP/1.1 200 OK") ||
			!strings.HasSuffix(out, "\r\n\r\n"+agent.ProxyMode) {
			t.Errorf("%s on %s: want 200 with body %q, got:\n%s", url, node, agent.ProxyMode, out)
		}
	}
}
