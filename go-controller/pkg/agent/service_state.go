package agent

import (
	"maps"
	"reflect"
	"slices"

	"github.com/kovs-net/kovs/go-controller/pkg/pipeline"
)

// SetServices replaces every Service's ports (the Service proxy's first sync).
func (s *NodeState) SetServices(all map[string][]pipeline.ServicePort) uint64 {
	return s.change(func() { s.services = maps.Clone(all) })
}

// SetService replaces one Service's ports (none: the Service is gone). Unchanged ports
// cost no flow sync.
func (s *NodeState) SetService(key string, ports []pipeline.ServicePort) uint64 {
	s.mu.Lock()
	old, had := s.services[key]
	unchanged := s.services != nil && had == (len(ports) > 0) && reflect.DeepEqual(old, ports)
	gen := s.generation
	s.mu.Unlock()
	if unchanged {
		return gen
	}
	return s.change(func() {
		if s.services == nil {
			s.services = map[string][]pipeline.ServicePort{}
		}
		if len(ports) == 0 {
			delete(s.services, key)
			return
		}
		s.services[key] = ports
	})
}

// servicePortsLocked lists every Service port, in Service key order. Called with mu held.
func (s *NodeState) servicePortsLocked() []pipeline.ServicePort {
	var out []pipeline.ServicePort
	for _, key := range slices.Sorted(maps.Keys(s.services)) {
		out = append(out, s.services[key]...)
	}
	return out
}

// appendServiceFlows compiles the Service flows and records their groups for Groups.
func (s *NodeState) appendServiceFlows(b *pipeline.Builder, flows []pipeline.Flow, ports []pipeline.ServicePort, pods []pipeline.PodPort) ([]pipeline.Flow, error) {
	svcFlows, groups, err := b.ServiceFlows(ports, pods)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	s.groups = groups
	s.mu.Unlock()
	return append(flows, svcFlows...), nil
}

// Groups are the groups the last Flows compiled: the flow syncer installs them in the
// same bundle as the flows.
func (s *NodeState) Groups() []pipeline.Group {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.groups)
}
