package agent

import (
	"net/netip"
	"reflect"

	"github.com/kovs-net/kovs/go-controller/pkg/pipeline"
)

// egressShare is what the node needs of the Egresses (egress.go computes it): which of its
// pods an Egress selects (by namespace/name, so a pod is redirected from its first flow
// sync on), the Egresses it holds, and where selected pods go as usual.
type egressShare struct {
	pods    map[string]egressPodRule // by "namespace/name"
	held    []pipeline.HeldEgress
	exclude []netip.Prefix
}

// egressPodRule is the Egress of one pod: the families it has IPs of, its ID, and its
// holder ("" none, or this node when Local).
type egressPodRule struct {
	Families []bool
	ID       uint32
	Local    bool
	Holder   string
}

// SetEgress replaces the node's Egress share; an unchanged one costs no flow sync.
func (s *NodeState) SetEgress(e *egressShare) uint64 {
	s.mu.Lock()
	unchanged := reflect.DeepEqual(s.egress, e)
	gen := s.generation
	s.mu.Unlock()
	if unchanged {
		return gen
	}
	return s.change(func() { s.egress = e })
}

// egressStateLocked is the snapshot's EgressState: the share joined with the local pods'
// ports and the tunnel peers (the holders' endpoints and gateway MACs).
func (s *NodeState) egressStateLocked(pods []pipeline.PodPort, peers []pipeline.TunnelPeer) *pipeline.EgressState {
	e := s.egress
	if e == nil {
		return nil
	}
	st := &pipeline.EgressState{Exclude: e.exclude, Held: e.held}
	for _, p := range peers {
		st.Peers = append(st.Peers, p.UnderlayIP)
	}
	for _, p := range pods {
		rule, ok := e.pods[p.Namespace+"/"+p.Name]
		if !ok {
			continue
		}
		ep := pipeline.EgressPod{OFPort: p.OFPort, Families: rule.Families, ID: rule.ID, Local: rule.Local}
		if peer, ok := s.peers[rule.Holder]; ok && !rule.Local && rule.ID != 0 {
			ep.HolderIP, ep.HolderMAC = peer.UnderlayIP, peer.GatewayMAC
		}
		if !ep.Local && !ep.HolderIP.IsValid() {
			ep.ID = 0 // no holder: dropped
		}
		st.Pods = append(st.Pods, ep)
	}
	return st
}
