package services_test

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kovs-net/kovs/test/e2e/framework"
)

// testTopologyHints: topology-aware routing (docs/services.md). The sandbox's nodes are
// in zones zone-a, zone-b and zone-c; a hand-written EndpointSlice hints each backend for
// one zone, the way kube-controller-manager does for trafficDistribution PreferSameZone.
// A pod on node1 (zone-a) reaches only the backend hinted for zone-a, which runs on node2
// (so it is the hint, not locality, that chooses); once no backend is hinted for zone-a,
// it reaches every backend again (kube-proxy's fallback).
func (c *svcCluster) testTopologyHints(t *testing.T) {
	for node, zone := range map[string]string{"node1": "zone-a", "node2": "zone-b"} {
		n, err := c.s.Client.CoreV1().Nodes().Get(context.Background(), node, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if got := n.Labels[corev1.LabelTopologyZone]; got != zone {
			t.Fatalf("node %s is in zone %q, want %q (the sandbox labels its nodes)", node, got, zone)
		}
	}
	svc, write := c.handSlicedService(t, "hints")
	ip := framework.ClusterIPs(svc)[0]
	hinted := func(i int, zone string) framework.SliceEndpoint {
		e := framework.ReadyEndpoint(c.web[i], ip)
		e.Zones = []string{zone}
		return e
	}

	write(hinted(0, "zone-b"), hinted(1, "zone-a"), hinted(2, "zone-c"))
	for node, backend := range map[string]int{"node1": 1, "node2": 0} {
		from := c.client(node)
		c.waitAnswered(t, from, ip, "80/tcp", "ClusterIP with zone hints")
		framework.Eventually(t, programTimeout, "only the backend hinted for "+node+"'s zone to answer", func() error {
			return onlyFrom(c.s.Spread(from, ip, "80/tcp", 10, probeTimeout), key(c.web[backend]))
		})
		a := c.s.Spread(from, ip, "80/tcp", spreadProbes, probeTimeout)
		t.Logf("from %s: %s", node, a)
		if err := onlyFrom(a, key(c.web[backend])); err != nil || a.ByIdentity[key(c.web[backend])] != spreadProbes {
			t.Errorf("zone hints from %s: %v, want all %d connections to %s", node, err, spreadProbes, key(c.web[backend]))
		}
	}

	// No backend for zone-a: node1's pods use every backend.
	write(hinted(0, "zone-b"), hinted(1, "zone-b"), hinted(2, "zone-c"))
	from := c.client("node1")
	framework.Eventually(t, programTimeout, "every backend to answer node1 without a hint for zone-a", func() error {
		return allOf(c.s.Spread(from, ip, "80/tcp", spreadProbes, probeTimeout), podKeys(c.web...)...)
	})
}
