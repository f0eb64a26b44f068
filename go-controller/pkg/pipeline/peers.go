package pipeline

import (
	"fmt"
	"slices"
)

// UsablePeers splits peers into those whose flows can be compiled for node n and those
// that cannot, with the reason: a peer that fails Validate, or whose pod subnets overlap
// another peer's, or that shares its underlay address with another (both then, since
// which one is right cannot be told). One bad Node record thus costs the routes to that
// node only; the node's other flows keep syncing. Usable peers keep their order.
func UsablePeers(n NodeConfig, peers []TunnelPeer) (usable []TunnelPeer, rejected map[string]string) {
	rejected = map[string]string{}
	for _, p := range peers {
		if err := p.Validate(n); err != nil {
			rejected[p.NodeName] = err.Error()
		}
	}
	for i, p := range peers {
		for _, q := range peers[i+1:] {
			if why := peerClash(p, q); why != "" {
				if _, bad := rejected[p.NodeName]; !bad {
					rejected[p.NodeName] = why + " of node " + q.NodeName
				}
				if _, bad := rejected[q.NodeName]; !bad {
					rejected[q.NodeName] = why + " of node " + p.NodeName
				}
			}
		}
	}
	for _, p := range peers {
		if _, bad := rejected[p.NodeName]; !bad {
			usable = append(usable, p)
		}
	}
	return usable, rejected
}

// peerClash says what two peers' flows would fight over ("" if nothing).
func peerClash(p, q TunnelPeer) string {
	if p.UnderlayIP == q.UnderlayIP {
		return fmt.Sprintf("underlay address %s is also that", p.UnderlayIP)
	}
	for _, a := range p.PodSubnets {
		if i := slices.IndexFunc(q.PodSubnets, a.Overlaps); i >= 0 {
			return fmt.Sprintf("pod subnet %s overlaps %s", a, q.PodSubnets[i])
		}
	}
	return ""
}
