package agent

import (
	"cmp"
	"slices"
	"sync"

	"github.com/kovs-net/kovs/go-controller/pkg/pipeline"
)

// serviceFlowCache keeps each Service's compiled and rendered flows and its groups while
// the Service's ports are unchanged, so that a change to one Service among a thousand
// compiles and renders one Service, not all of them. A Service port's flows depend only
// on the port and the builder's node and round (pipeline.Builder.ServicePortsFlows).
type serviceFlowCache struct {
	mu      sync.Mutex
	node    *pipeline.NodeConfig // what the entries were compiled for (NodeState.node)
	entries map[string]serviceFlowEntry
}

type serviceFlowEntry struct {
	// ports is the very slice the entry was compiled from: NodeState never changes a
	// Service's slice in place (SetService replaces it), so the same slice means the same
	// ports.
	ports  []pipeline.ServicePort
	flows  map[string]string // flow key -> text, as renderFlows renders them
	groups []pipeline.Group
}

func sameSlice(a, b []pipeline.ServicePort) bool {
	return len(a) == len(b) && (len(a) == 0 || &a[0] == &b[0])
}

// render adds every Service's flows to out and returns all their groups, sorted by ID,
// compiling only the Services that changed since the last call.
func (c *serviceFlowCache) render(b *pipeline.Builder, node *pipeline.NodeConfig, services map[string][]pipeline.ServicePort,
	out map[string]string) ([]pipeline.Group, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.node != node || c.entries == nil {
		c.node, c.entries = node, map[string]serviceFlowEntry{}
	}
	for key := range c.entries {
		if _, ok := services[key]; !ok {
			delete(c.entries, key)
		}
	}
	var groups []pipeline.Group
	for key, ports := range services {
		e, ok := c.entries[key]
		if !ok || !sameSlice(e.ports, ports) {
			flows, gs, err := b.ServicePortsFlows(ports)
			if err != nil {
				return nil, err
			}
			e = serviceFlowEntry{ports: ports, flows: renderFlows(flows), groups: gs}
			c.entries[key] = e
		}
		for k, v := range e.flows {
			out[k] = v
		}
		groups = append(groups, e.groups...)
	}
	slices.SortFunc(groups, func(x, y pipeline.Group) int { return cmp.Compare(x.ID, y.ID) })
	return groups, nil
}
