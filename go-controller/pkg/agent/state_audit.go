package agent

import (
	"reflect"

	"github.com/kovs-net/kovs/go-controller/pkg/pipeline"
)

// SetAudit replaces what the policy stages log (docs/audit.md; nil: nothing) and returns
// the generation that includes it. An unchanged setting changes nothing.
func (s *NodeState) SetAudit(a *pipeline.Audit) uint64 {
	s.mu.Lock()
	same := reflect.DeepEqual(s.audit, a)
	gen := s.generation
	s.mu.Unlock()
	if same {
		return gen
	}
	return s.change(func() { s.audit = a })
}
