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
// its tunnel peers, its Services and, when NetworkPolicy is enabled, the node's share of
// it. Every change bumps the generation; the flow syncer reports which generation it
// installed, so a CNI ADD can wait for the flows of its own pod. The flows are the
// pipeline's stages compiled from a snapshot of the state (Desired), by one compiler that
// keeps every unchanged object's flows.
type NodeState struct {
	mu    sync.Mutex
	node  *pipeline.NodeConfig
	round pipeline.Round
	pods  map[string]pipeline.PodPort    // by port name
	peers map[string]pipeline.TunnelPeer // by node name, as the API has them
	// usable are the peers whose flows compile for the node, by name; rejected the
	// others, with the reason (pipeline.UsablePeers). Both follow SetNode and SetPeers.
	usable     []pipeline.TunnelPeer
	rejected   map[string]string
	generation uint64
	onChange   func()
	// policy is the node's NetworkPolicy share (nil: NetworkPolicy disabled). It is never
	// modified in place: SetPolicy replaces it.
	policy *policy.NodeShare
	// policyChanged is closed, and replaced, whenever policy changes.
	policyChanged chan struct{}
	// services are the Service ports by Service (namespace/name); nil until the Service
	// proxy has synced (see service_state.go). A Service's slice is replaced, never
	// changed in place.
	services map[string][]pipeline.ServicePort
	// evictions are learned SCTP translations to delete once their generation is
	// installed (service_state.go).
	evictions []pendingEviction
	// conntrackDue is the generation whose installation calls for a cleanup of stale UDP
	// conntrack entries (service_conntrack.go); 0: none due.
	conntrackDue uint64
	// egress is the node's share of the Egresses (egress_state.go); nil without any. It is
	// replaced, never changed in place.
	egress *egressShare
	// audit is what the policy stages log (state_audit.go); nil: nothing.
	audit *pipeline.Audit

	// stages are the pipeline; compiler compiles it for Desired (compileMu: one
	// compilation at a time).
	stages    pipeline.Registry
	compileMu sync.Mutex
	compiler  *pipeline.Compiler
}

// NewNodeState returns an empty state of the kovs pipeline (pipeline.Stages); onChange is
// called after every change.
func NewNodeState(round pipeline.Round, onChange func()) *NodeState {
	return NewNodeStateOf(pipeline.Stages(), round, onChange)
}

// NewNodeStateOf is NewNodeState for the pipeline of stages.
func NewNodeStateOf(stages pipeline.Registry, round pipeline.Round, onChange func()) *NodeState {
	return &NodeState{round: round, pods: map[string]pipeline.PodPort{}, peers: map[string]pipeline.TunnelPeer{},
		onChange: onChange, policyChanged: make(chan struct{}), stages: stages, compiler: pipeline.NewCompiler(stages)}
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
	return s.change(func() {
		s.node = &n
		s.splitPeers()
	})
}

// splitPeers sorts the peers into usable and rejected for the node. Called with mu held.
func (s *NodeState) splitPeers() {
	all := sortedPeers(s.peers)
	if s.node == nil {
		s.usable, s.rejected = all, nil
		return
	}
	s.usable, s.rejected = pipeline.UsablePeers(*s.node, all)
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
		s.splitPeers()
	})
}

// RejectedPeers are the peers whose records are unusable for this node, with the reason:
// they get no flows (nil before the node is set).
func (s *NodeState) RejectedPeers() map[string]string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return maps.Clone(s.rejected)
}

// Pods returns the local pods' ports, by port name.
func (s *NodeState) Pods() map[string]pipeline.PodPort {
	s.mu.Lock()
	defer s.mu.Unlock()
	return maps.Clone(s.pods)
}

// Peers returns the usable tunnel peers (those with flows) sorted by node name.
func (s *NodeState) Peers() []pipeline.TunnelPeer {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.usable)
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

// Snapshot is the state as the pipeline's stages read it, and the generation it is. Before
// the node's own configuration is known there is nothing to compile.
func (s *NodeState) Snapshot() (pipeline.Snapshot, uint64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.node == nil {
		return pipeline.Snapshot{}, s.generation, errNodeNotConfigured
	}
	snap := pipeline.Snapshot{Node: *s.node, Round: s.round, Peers: slices.Clone(s.usable), Policy: s.policy,
		Services: maps.Clone(s.services), Pods: make([]pipeline.PodPort, 0, len(s.pods)), Audit: s.audit}
	for _, name := range slices.Sorted(maps.Keys(s.pods)) {
		snap.Pods = append(snap.Pods, s.pods[name])
	}
	snap.Egress = s.egressStateLocked(snap.Pods, snap.Peers)
	return snap, s.generation, nil
}

// Desired compiles the flows and groups the node wants, as the switch holds them, and
// returns the generation they reflect. Only the objects (pods, peers, Services,
// NetworkPolicy clauses, ...) that changed since the last call are compiled.
func (s *NodeState) Desired() (pipeline.Desired, uint64, error) {
	snap, gen, err := s.Snapshot()
	if err != nil {
		return pipeline.Desired{}, gen, err
	}
	s.compileMu.Lock()
	defer s.compileMu.Unlock()
	d, err := s.compiler.Compile(snap)
	return d, gen, err
}

// Compiled compiles the desired flows and groups from scratch, as typed values (for tests
// and tools: the flow sync uses Desired), and returns the generation they reflect.
func (s *NodeState) Compiled() (pipeline.Compiled, uint64, error) {
	snap, gen, err := s.Snapshot()
	if err != nil {
		return pipeline.Compiled{}, gen, err
	}
	c, err := s.stages.Compile(snap)
	return c, gen, err
}

// Flows are Compiled's flows.
func (s *NodeState) Flows() ([]pipeline.Flow, uint64, error) {
	c, gen, err := s.Compiled()
	return c.Flows, gen, err
}

// generationNow is the current generation.
func (s *NodeState) generationNow() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.generation
}

// Generation is the current generation: the flow syncer's resync compiles nothing while
// it is the one installed (FlowSyncer.CheapResync).
func (s *NodeState) Generation() uint64 { return s.generationNow() }

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
