package pipeline

import "testing"

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

// TestFlowInvariants checks every flow of every reference node against the pipeline's
// invariants (Registry.Check): jumps only go forward, terminal actions come last, cookies
// name an owner of the right round, each table has one miss flow, and no two objects
// compile different flows under one table, priority and match.
func TestFlowInvariants(t *testing.T) {
	withServices := policyScenario()
	withServices.name, withServices.services = "policy-and-services", map[string][]ServicePort{"default/all": serviceScenarioPorts()}
	scenarios := []scenario{oneNodeTwoPods(), threeNodesDualStack(1), threeNodesDualStack(2), threeNodesDualStack(3),
		policyScenario(), withServices}
	for _, sc := range scenarios {
		t.Run(sc.name, func(t *testing.T) {
			for _, problem := range Stages().Check(sc.compile(t, Stages()), testRound) {
				t.Error(problem)
			}
		})
	}
}

func checkJumps(t *testing.T, f Flow) {
	t.Helper()
	for _, p := range jumpProblems(f) {
		t.Error(p)
	}
}

func TestRegistryValidates(t *testing.T) {
	if err := Stages().Validate(); err != nil {
		t.Fatalf("the kovs pipeline: %v", err)
	}
	base, _ := Stages().Stage(CategoryBase)
	clash := Stage{Name: "clash", Category: 42, Tables: []Table{{ID: Classifier.ID, Name: "Other"}},
		Objects: func(*Snapshot) []Object { return nil }}
	for name, r := range map[string]Registry{
		"a table number twice": Stages().With(clash),
		"a category twice":     Stages().With(Stage{Name: "again", Category: CategoryPod, Objects: base.Objects}),
		"a name twice":         Stages().With(Stage{Name: "pod", Category: 42, Objects: base.Objects}),
		"the learned category": Stages().With(Stage{Name: "learned", Category: CategoryLearned, Objects: base.Objects}),
		"no objects":           Stages().With(Stage{Name: "empty", Category: 42}),
		"a last table that continues": Stages().With(Stage{Name: "tail", Category: 42, Objects: base.Objects,
			Tables: []Table{{ID: 99, Name: "Tail", Miss: MissNext}}}),
	} {
		if err := r.Validate(); err == nil {
			t.Errorf("%s: accepted", name)
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
