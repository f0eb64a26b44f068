package agent

import (
	"slices"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
)

// proxyNode is the node the Service proxy serves, as topology-aware routing sees it: its
// name (EndpointSlice hints.forNodes, PreferSameNode) and its topology.kubernetes.io/zone
// label (hints.forZones; "" without the label).
type proxyNode struct {
	name string
	zone string
}

// Topology modes, as kube-proxy (pkg/proxy/topology.go) names what the hints ask for.
const (
	topologyAny      = ""                                              // every ready endpoint
	topologySameNode = corev1.ServiceTrafficDistributionPreferSameNode // endpoints hinted for this node
	topologySameZone = corev1.ServiceTrafficDistributionPreferSameZone // endpoints hinted for this zone
)

// endpointHints are an endpoint's hints.forZones and hints.forNodes names.
func endpointHints(h *discoveryv1.EndpointHints) (zones, nodes []string) {
	if h == nil {
		return nil, nil
	}
	for _, z := range h.ForZones {
		zones = append(zones, z.Name)
	}
	for _, n := range h.ForNodes {
		nodes = append(nodes, n.Name)
	}
	return zones, nodes
}

// topologyMode is what the hints of one Service port's endpoints (of one family) ask of
// this node, as kube-proxy decides it. kube-proxy reads only the hints: the EndpointSlice
// controller writes them from trafficDistribution (PreferSameNode: this node and its
// zone; PreferSameZone and PreferClose: the endpoint's zone) or the
// service.kubernetes.io/topology-mode annotation (Auto: zones in proportion to their
// CPUs). Only ready endpoints count:
//   - every one has a node hint and one is hinted for this node: PreferSameNode;
//   - else every one has a zone hint and one is hinted for this node's zone: PreferSameZone;
//   - else (a ready endpoint without hints, none for this node or zone, no ready
//     endpoint): every endpoint.
func topologyMode(eps []serviceEndpoint, self proxyNode) string {
	ready, allNode, forNode, allZone, forZone := false, true, false, true, false
	for _, e := range eps {
		if !e.ready {
			continue
		}
		ready = true
		if len(e.nodeHints) == 0 {
			allNode = false
		} else if slices.Contains(e.nodeHints, self.name) {
			forNode = true
		}
		if len(e.zoneHints) == 0 {
			allZone = false
		} else if slices.Contains(e.zoneHints, self.zone) {
			forZone = true
		}
	}
	switch {
	case !ready:
		return topologyAny
	case allNode && forNode:
		return topologySameNode
	case allZone && forZone:
		return topologySameZone
	}
	return topologyAny
}

// markTopology sets inTopology on the endpoints this node's Cluster-policy traffic may
// use under the port's topology mode. There is no fallback here: it is in topologyMode,
// which chooses every endpoint when the hints leave this node none.
func markTopology(eps []serviceEndpoint, self proxyNode) {
	mode := topologyMode(eps, self)
	for i := range eps {
		e := &eps[i]
		switch mode {
		case topologySameNode:
			e.inTopology = slices.Contains(e.nodeHints, self.name)
		case topologySameZone:
			e.inTopology = slices.Contains(e.zoneHints, self.zone)
		default:
			e.inTopology = true
		}
	}
}
