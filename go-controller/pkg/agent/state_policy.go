package agent

import "github.com/kovs-net/kovs/go-controller/pkg/policy"

// EnablePolicy turns NetworkPolicy enforcement on with an empty share: until the first
// snapshot arrives every local pod is pending, closed in both directions to all but its
// node (established connections continue). Call it before the first flow sync.
func (s *NodeState) EnablePolicy(node string) uint64 {
	empty := policy.NewNodeShare(node)
	return s.SetPolicy(empty)
}

// SetPolicy replaces the node's NetworkPolicy share and returns the generation that
// includes it. The state keeps share as it is: the caller must not modify it afterwards.
func (s *NodeState) SetPolicy(share policy.NodeShare) uint64 {
	return s.change(func() {
		s.policy = &share
		close(s.policyChanged)
		s.policyChanged = make(chan struct{})
	})
}

// PolicyEnabled reports whether NetworkPolicy is enforced on this node.
func (s *NodeState) PolicyEnabled() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.policy != nil
}

// PolicyHasPod reports whether the current share lists the pod (kovs-controller has
// evaluated it), the generation of the state it answered from, and a channel closed at
// the next change of the share.
func (s *NodeState) PolicyHasPod(k policy.PodKey) (bool, uint64, <-chan struct{}) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.policy != nil && s.policy.HasPod(k), s.generation, s.policyChanged
}

// Policy is the node's current NetworkPolicy share (nil: NetworkPolicy disabled). The
// caller must not modify it.
func (s *NodeState) Policy() *policy.NodeShare {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.policy
}
