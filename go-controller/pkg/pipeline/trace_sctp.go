package pipeline

import "slices"

// Flows returns the flows, learned ones included, whose cookie filter selects, in reading
// order: e.g. LearnedFilter() for the SCTP replies traces so far have learned.
func (t *Tracer) Flows(filter CookieFilter) []Flow {
	var out []Flow
	for _, flows := range t.tables {
		for _, f := range flows {
			if filter.Matches(f.Cookie) {
				out = append(out, f)
			}
		}
	}
	SortFlows(out)
	return out
}

// DeleteFlows removes the flows whose cookie filter selects, as `ovs-ofctl del-flows
// cookie=VALUE/MASK` does: the agent deletes the learned SCTP replies so after a policy
// change.
func (t *Tracer) DeleteFlows(filter CookieFilter) {
	for id, flows := range t.tables {
		t.tables[id] = slices.DeleteFunc(flows, func(f Flow) bool { return filter.Matches(f.Cookie) })
	}
}
