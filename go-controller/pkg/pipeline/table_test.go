package pipeline

import (
	"fmt"
	"testing"
)

func TestTablesDeclaredInPipelineOrder(t *testing.T) {
	tables := Tables()
	names := map[string]bool{}
	for i, tbl := range tables {
		if i > 0 && tbl.ID <= tables[i-1].ID {
			t.Errorf("table %s: ID %d not after %s", tbl.Name, tbl.ID, tables[i-1])
		}
		if names[tbl.Name] {
			t.Errorf("table name %s declared twice", tbl.Name)
		}
		names[tbl.Name] = true
		if got, ok := TableByID(tbl.ID); !ok || got != tbl {
			t.Errorf("TableByID(%d) = %v, %t", tbl.ID, got, ok)
		}
		next, ok := tbl.missTarget()
		switch {
		case tbl.Miss == MissJump && (!ok || next.ID <= tbl.ID):
			t.Errorf("table %s: miss jumps to %v, want a later table", tbl.Name, next)
		case tbl.Miss == MissNext && (!ok || next != tables[i+1]):
			t.Errorf("table %s: miss continues to %v, want %s", tbl.Name, next, tables[i+1])
		case tbl.Miss == MissDrop && ok:
			t.Errorf("table %s: drop miss has a target %s", tbl.Name, next)
		}
	}
	if last := tables[len(tables)-1]; last.Miss != MissDrop {
		t.Errorf("last table %s must drop on miss", last.Name)
	}
}

// TestFlowInvariants checks every flow of every reference node: jumps only go forward,
// terminal actions come last, cookies name an owner of the right round, each table has one
// miss flow, and no two flows of a table overlap at the same priority with the same match.
func TestFlowInvariants(t *testing.T) {
	scenarios := []scenario{oneNodeTwoPods(), threeNodesDualStack(1), threeNodesDualStack(2), threeNodesDualStack(3),
		policyScenario()}
	for _, sc := range scenarios {
		t.Run(sc.name, func(t *testing.T) {
			flows := sc.flows(t)
			seen := map[string]bool{}
			misses := map[uint8]int{}
			for _, f := range flows {
				checkJumps(t, f)
				if !f.Cookie.Owned() || f.Cookie.Round() != testRound {
					t.Errorf("cookie %s of %s: want an owner and round %d", f.Cookie, f, testRound)
				}
				key := fmt.Sprintf("%d/%d/%s", f.Table.ID, f.Priority, f.Match)
				if seen[key] {
					t.Errorf("two flows with table/priority/match %s", key)
				}
				seen[key] = true
				if f.Priority == prioMiss {
					misses[f.Table.ID]++
				}
			}
			for _, tbl := range Tables() {
				if misses[tbl.ID] != 1 {
					t.Errorf("table %s has %d priority-0 flows, want 1", tbl.Name, misses[tbl.ID])
				}
			}
		})
	}
}

func checkJumps(t *testing.T, f Flow) {
	t.Helper()
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
				t.Errorf("%s: drop is not the last action", f)
			}
			continue
		default:
			continue
		}
		if i != len(f.Actions)-1 {
			t.Errorf("%s: %s is not the last action", f, a)
		}
		if target.ID <= f.Table.ID {
			t.Errorf("%s: jumps back to %s", f, target)
		}
	}
}

func TestRegisterFields(t *testing.T) {
	for _, tc := range []struct {
		mark       RegMark
		load, subf string
	}{
		{PortClassPod.Mark(), "set_field:0x1/0xf->reg0", "NXM_NX_REG0[0..3]"},
		{PortClassGateway.Mark(), "set_field:0x3/0xf->reg0", "NXM_NX_REG0[0..3]"},
		{OutPortField.Mark(7), "set_field:0x7->reg1", "NXM_NX_REG1[]"},
		{RegField{Name: "Flag", Reg: 3, Start: 4, End: 4}.Mark(1), "set_field:0x10/0x10->reg3", "NXM_NX_REG3[4..4]"},
	} {
		if got := LoadReg(tc.mark).String(); got != tc.load {
			t.Errorf("LoadReg(%v) = %s, want %s", tc.mark, got, tc.load)
		}
		if got := tc.mark.Field.subfield(); got != tc.subf {
			t.Errorf("subfield of %v = %s, want %s", tc.mark.Field, got, tc.subf)
		}
	}
	if got := MatchAll().Reg(PortClassTunnel.Mark()).String(); got != "reg0=0x2/0xf" {
		t.Errorf("match = %s", got)
	}
}
