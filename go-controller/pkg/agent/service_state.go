package agent

import (
	"maps"
	"reflect"

	"github.com/kovs-net/kovs/go-controller/pkg/pipeline"
)

// SetServices replaces every Service's ports (the Service proxy's first sync).
func (s *NodeState) SetServices(all map[string][]pipeline.ServicePort) uint64 {
	return s.change(func() {
		for key, old := range s.services {
			s.queueEvictionsLocked(old, all[key])
		}
		// The first Services (after a restart, entries to endpoints that left meanwhile).
		s.conntrackDue = s.generation + 1
		s.services = maps.Clone(all)
	})
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
		s.queueEvictionsLocked(s.services[key], ports)
		if hasUDP(s.services[key]) || hasUDP(ports) {
			s.conntrackDue = s.generation + 1
		}
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

// pendingEviction are learned translations to delete once generation gen is installed.
type pendingEviction struct {
	gen     uint64
	filters []pipeline.CookieFilter
}

// queueEvictionsLocked notes, for the generation being made, the learned SCTP
// translations (pipeline.SCTPTranslationFilter) of old's stateless ports to endpoints
// that now's ports no longer list: their associations must not stay pinned to a pod that
// is gone. Called inside change, with mu held.
func (s *NodeState) queueEvictionsLocked(old, now []pipeline.ServicePort) {
	still := map[string]bool{}
	for _, p := range now {
		for _, ep := range p.Listed {
			still[pipeline.SCTPTranslationKey(p, ep)] = true
		}
	}
	var gone []pipeline.CookieFilter
	for _, p := range old {
		for _, ep := range p.Listed {
			if p.Stateless && !still[pipeline.SCTPTranslationKey(p, ep)] {
				gone = append(gone, pipeline.SCTPTranslationFilter(p, ep))
			}
		}
	}
	if len(gone) > 0 {
		s.evictions = append(s.evictions, pendingEviction{gen: s.generation + 1, filters: gone})
	}
}

// TakeEvictions returns, and forgets, the learned translations to delete now that
// generation gen is installed: the flows that no longer send new associations to their
// endpoints are in place, so an evicted association cannot be pinned to it again.
func (s *NodeState) TakeEvictions(gen uint64) []pipeline.CookieFilter {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []pipeline.CookieFilter
	keep := s.evictions[:0]
	for _, e := range s.evictions {
		if e.gen <= gen {
			out = append(out, e.filters...)
		} else {
			keep = append(keep, e)
		}
	}
	s.evictions = keep
	return out
}
