package pipeline

import (
	"fmt"
	"maps"
	"slices"
)

// lookup finds the flow of table a packet meets, as OVS's classifier does, conjunctive
// matches included. The best ordinary flow wins unless conjunctive clause flows match at
// a higher priority: then, priority by priority from the highest, a conjunction whose
// every clause matched sends the lookup again with conj_id set to it (where clause flows
// do not take part), and the flow found wins. It returns the flow and, when it came from a
// conjunction, every conjunction that completed at that priority.
//
// Two ordinary flows matching at the winning priority are an error, not a guess; so are
// clause flows and ordinary flows matching at one priority.
func (t *Tracer) lookup(table Table, st *traceState) (Flow, []uint32, bool, error) {
	hard, found, err := t.ordinaryMatch(table, st)
	if err != nil {
		return Flow{}, nil, false, err
	}
	levels := t.clauseMatches(table, st)
	for _, prio := range slices.Backward(slices.Sorted(maps.Keys(levels))) {
		if found && prio <= hard.Priority {
			if prio == hard.Priority {
				return Flow{}, nil, false, fmt.Errorf("clause flows and an ordinary flow match at priority %d in %s:\n  %s\n  %s",
					prio, table.Name, hard, levels[prio][0])
			}
			break
		}
		done := completed(levels[prio])
		if len(done) == 0 {
			continue
		}
		st.conjID = done[0]
		flow, ok, err := t.ordinaryMatch(table, st)
		st.conjID = 0
		if err != nil {
			return Flow{}, nil, false, err
		}
		if ok && !flow.Match.matchesField(FieldConjID) {
			// OVS found an ordinary flow that ignores conj_id: the same as no conjunction.
			return flow, nil, true, nil
		}
		if ok {
			return flow, done, true, nil
		}
	}
	return hard, nil, found, nil
}

// ordinaryMatch is the highest-priority flow of table without conjunction actions that
// matches the packet.
func (t *Tracer) ordinaryMatch(table Table, st *traceState) (Flow, bool, error) {
	var best Flow
	found := false
	for _, f := range t.tables[table.ID] {
		if found && f.Priority < best.Priority {
			break
		}
		if isClause(f) || !st.matches(f.Match) {
			continue
		}
		if found {
			return Flow{}, false, fmt.Errorf("ambiguous match in %s:\n  %s\n  %s", table.Name, best, f)
		}
		best, found = f, true
	}
	return best, found, nil
}

// clauseMatches are the clause flows of table that match the packet, by priority.
func (t *Tracer) clauseMatches(table Table, st *traceState) map[uint16][]Flow {
	levels := map[uint16][]Flow{}
	for _, f := range t.tables[table.ID] {
		if isClause(f) && st.matches(f.Match) {
			levels[f.Priority] = append(levels[f.Priority], f)
		}
	}
	return levels
}

// completed returns, sorted, the conjunctions every clause of which is among the
// matching clause flows.
func completed(flows []Flow) []uint32 {
	type progress struct {
		n    uint8
		seen map[uint8]bool
	}
	conj := map[uint32]*progress{}
	for _, f := range flows {
		for _, a := range f.Actions {
			c, ok := a.(Conjunction)
			if !ok {
				continue
			}
			p := conj[c.ID]
			if p == nil {
				p = &progress{n: c.NClauses, seen: map[uint8]bool{}}
				conj[c.ID] = p
			}
			p.seen[c.Clause] = true
		}
	}
	var done []uint32
	for id, p := range conj {
		if len(p.seen) == int(p.n) {
			done = append(done, id)
		}
	}
	slices.Sort(done)
	return done
}

// isClause reports whether f is a clause of conjunctive matches: its actions are
// conjunction actions.
func isClause(f Flow) bool {
	return len(f.Actions) > 0 && slices.ContainsFunc(f.Actions, func(a Action) bool {
		_, ok := a.(Conjunction)
		return ok
	})
}
