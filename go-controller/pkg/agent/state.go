package agent

import (
	"maps"
	"reflect"
	"slices"
	"sync"

	"github.com/kovs-net/kovs/go-controller/pkg/pipeline"
	"github.com/kovs-net/kovs/go-controller/pkg/policy"
)

// NodeState is the desired state of this node's datapath: the node itself, its pods' ports,
// its tunnel peers and, when NetworkPolicy is enabled, the node's share of it. Every change
// bumps the generation; the flow syncer reports which generation it installed, so a CNI
// ADD can wait for the flows of its own pod.
type NodeState struct {
	mu         sync.Mutex
	node       *pipeline.NodeConfig
	round      pipeline.Round
	pods       map[string]pipeline.PodPort    // by port name
	peers      map[string]pipeline.TunnelPeer // by node name
	generation uint64
	onChange   func()
	// policy is the node's NetworkPolicy share (nil: NetworkPolicy disabled). It is never
	// modified in place: SetPolicy replaces it.
	policy *policy.NodeShare
	// policyChanged is closed, and replaced, whenever policy changes.
	policyChanged chan struct{}
	// services are the Service ports by Service (namespace/name); nil until the Service
	// proxy has synced (see service_state.go). groups are the groups of the last Flows.
	services map[string][]pipeline.ServicePort
	groups   []pipeline.Group
	// serviceCache keeps the Services' rendered flows between RenderedFlows calls.
	serviceCache serviceFlowCache
	// evictions are learned SCTP translations to delete once their generation is
	// installed (service_state.go).
	evictions []pendingEviction
}

// NewNodeState returns an empty state; onChange is called after every change.
func NewNodeState(round pipeline.Round, onChange func()) *NodeState {
	return &NodeState{round: round, pods: map[string]pipeline.PodPort{}, peers: map[string]pipeline.TunnelPeer{},
		onChange: onChange, policyChanged: make(chan struct{})}
}

func (s *NodeState) change(f func()) uint64 {
	s.mu.Lock()
	f()
	s.generation++
	g := s.generation
	s.mu.Unlock()
	if s.onChange != nil {
		s.onChange()
	}
	return g
}

// SetNode sets the node's own configuration.
func (s *NodeState) SetNode(n pipeline.NodeConfig) uint64 {
	return s.change(func() { s.node = &n })
}

// SetPod adds or updates a local pod's port; it returns the generation that includes it.
func (s *NodeState) SetPod(port string, p pipeline.PodPort) uint64 {
	return s.change(func() { s.pods[port] = p })
}

// DeletePod removes a local pod's port.
func (s *NodeState) DeletePod(port string) uint64 {
	return s.change(func() { delete(s.pods, port) })
}

// SetPeers replaces the tunnel peers (a no-op when they are unchanged: Node status
// heartbeats must not cost a flow sync).
func (s *NodeState) SetPeers(peers []pipeline.TunnelPeer) uint64 {
	s.mu.Lock()
	unchanged := reflect.DeepEqual(sortedPeers(s.peers), sortedPeersOf(peers))
	gen := s.generation
	s.mu.Unlock()
	if unchanged {
		return gen
	}
	return s.change(func() {
		s.peers = map[string]pipeline.TunnelPeer{}
		for _, p := range peers {
			s.peers[p.NodeName] = p
		}
	})
}

// Pods returns the local pods' ports, by port name.
func (s *NodeState) Pods() map[string]pipeline.PodPort {
	s.mu.Lock()
	defer s.mu.Unlock()
	return maps.Clone(s.pods)
}

// Peers returns the tunnel peers sorted by node name.
func (s *NodeState) Peers() []pipeline.TunnelPeer {
	s.mu.Lock()
	defer s.mu.Unlock()
	return sortedPeers(s.peers)
}

func sortedPeersOf(peers []pipeline.TunnelPeer) []pipeline.TunnelPeer {
	m := map[string]pipeline.TunnelPeer{}
	for _, p := range peers {
		m[p.NodeName] = p
	}
	return sortedPeers(m)
}

func sortedPeers(m map[string]pipeline.TunnelPeer) []pipeline.TunnelPeer {
	names := slices.Sorted(maps.Keys(m))
	out := make([]pipeline.TunnelPeer, 0, len(names))
	for _, n := range names {
		out = append(out, m[n])
	}
	return out
}

// compilation is what one compilation of the node's flows reads, taken at once under mu.
type compilation struct {
	node     *pipeline.NodeConfig
	gen      uint64
	pods     []pipeline.PodPort // by port name
	peers    []pipeline.TunnelPeer
	share    *policy.NodeShare
	services map[string][]pipeline.ServicePort
	ports    []pipeline.ServicePort // every Service port, in Service key order
}

// compile snapshots the state and returns a builder for it. Before the node's own
// configuration is known there is nothing to install.
func (s *NodeState) compile() (compilation, *pipeline.Builder, error) {
	s.mu.Lock()
	c := compilation{node: s.node, gen: s.generation, peers: sortedPeers(s.peers), share: s.policy,
		services: maps.Clone(s.services), ports: s.servicePortsLocked()}
	c.pods = make([]pipeline.PodPort, 0, len(s.pods))
	for _, name := range slices.Sorted(maps.Keys(s.pods)) {
		c.pods = append(c.pods, s.pods[name])
	}
	s.mu.Unlock()
	if c.node == nil {
		return c, nil, errNodeNotConfigured
	}
	b, err := pipeline.NewBuilder(*c.node, s.round)
	return c, b, err
}

// Flows compiles the desired flows and returns the generation they reflect.
func (s *NodeState) Flows() ([]pipeline.Flow, uint64, error) {
	c, b, err := s.compile()
	if err != nil {
		return nil, c.gen, err
	}
	flows, err := b.NodeFlows(c.pods, c.peers)
	if err != nil {
		return flows, c.gen, err
	}
	if flows, err = s.appendServiceFlows(b, flows, c.ports, c.pods); err != nil {
		return nil, c.gen, err
	}
	if c.share == nil {
		return flows, c.gen, nil
	}
	return append(flows, b.PolicyFlows(*c.share, c.pods)...), c.gen, nil
}

// RenderedFlows is Flows rendered as the flow syncer keys and compares them (flow key ->
// text), with the Services' flows kept from the previous call while their ports are
// unchanged.
func (s *NodeState) RenderedFlows() (map[string]string, uint64, error) {
	c, b, err := s.compile()
	if err != nil {
		return nil, c.gen, err
	}
	flows, err := b.NodeFlows(c.pods, c.peers)
	if err != nil {
		return nil, c.gen, err
	}
	flows = append(flows, b.ServiceHairpinFlows(c.ports, c.pods)...)
	if c.share != nil {
		flows = append(flows, b.PolicyFlows(*c.share, c.pods)...)
	}
	out := renderFlows(flows)
	groups, err := s.serviceCache.render(b, c.node, c.services, out)
	if err != nil {
		return nil, c.gen, err
	}
	s.mu.Lock()
	s.groups = groups
	s.mu.Unlock()
	return out, c.gen, nil
}

// generationNow is the current generation.
func (s *NodeState) generationNow() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.generation
}

// ValidatePod checks that the pod's flows compile for this node, so one bad pod can never
// keep the node's other flows from being installed.
func (s *NodeState) ValidatePod(p pipeline.PodPort) error {
	s.mu.Lock()
	node, round := s.node, s.round
	s.mu.Unlock()
	if node == nil {
		return errNodeNotConfigured
	}
	b, err := pipeline.NewBuilder(*node, round)
	if err != nil {
		return err
	}
	_, err = b.PodFlows(p)
	return err
}
