package pipeline

import "fmt"

// Check lists how a compilation of the registry breaks the pipeline's invariants (none
// for a correct one): every flow is in a table of the registry and carries a cookie of
// round that names a stage of the registry as its owner; jumps (goto_table, ct(table=))
// only go forward and terminal actions come last; no two objects compile different flows
// under one table, priority and match; every table has exactly one miss flow
// (priority 0); every group a flow outputs to is compiled. The invariant tests run it on
// every reference scenario, and so on every stage that is registered.
func (r Registry) Check(c Compiled, round Round) []string {
	problems := append([]string(nil), c.Conflicts...)
	groups := map[uint32]bool{}
	for _, g := range c.Groups {
		groups[g.ID] = true
	}
	misses := map[uint8]int{}
	for _, f := range c.Flows {
		if _, ok := r.TableByID(f.Table.ID); !ok {
			problems = append(problems, fmt.Sprintf("%s: table %d is no stage's", f, f.Table.ID))
		}
		if _, ok := r.Stage(f.Cookie.Category()); !ok || f.Cookie.Round() != round {
			problems = append(problems, fmt.Sprintf("cookie %s of %s: want a stage's category and round %d", f.Cookie, f, round))
		}
		problems = append(problems, jumpProblems(f)...)
		for _, a := range f.Actions {
			if g, ok := a.(GroupOutput); ok && !groups[g.ID] {
				problems = append(problems, fmt.Sprintf("%s: group %d is not compiled", f, g.ID))
			}
		}
		if f.Priority == prioMiss {
			misses[f.Table.ID]++
		}
	}
	for _, t := range r.Tables() {
		if misses[t.ID] != 1 {
			problems = append(problems, fmt.Sprintf("table %s has %d priority-0 flows, want 1", t.Name, misses[t.ID]))
		}
	}
	return problems
}

// jumpProblems checks that f's jumps go forward and that its terminal action is last.
func jumpProblems(f Flow) []string {
	var problems []string
	for i, a := range f.Actions {
		var target Table
		switch a := a.(type) {
		case GotoTable:
			target = a.Table
		case CT:
			if !a.Recirculate {
				continue
			}
			target = a.Table
			if f.Table == HairpinUnSNAT && target == ConntrackState {
				// The one way back: a hairpin reply, un-SNATed, is un-DNATed and
				// resumes as any tracked packet (a recirculation, not a goto).
				continue
			}
		case Drop:
			if i != len(f.Actions)-1 {
				problems = append(problems, fmt.Sprintf("%s: drop is not the last action", f))
			}
			continue
		default:
			continue
		}
		if i != len(f.Actions)-1 {
			problems = append(problems, fmt.Sprintf("%s: %s is not the last action", f, a))
		}
		if target.ID <= f.Table.ID {
			problems = append(problems, fmt.Sprintf("%s: jumps back to %s", f, target))
		}
	}
	return problems
}
