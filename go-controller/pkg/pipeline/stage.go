package pipeline

import (
	"cmp"
	"errors"
	"fmt"
	"slices"

	"github.com/kovs-net/kovs/go-controller/pkg/policy"
)

// Stage is one part of the pipeline, as a value: the tables it declares, the cookie
// category of every flow it compiles, and Objects, a pure function that splits a node's
// Snapshot into the objects that own the stage's flows and groups (a pod, a tunnel peer,
// a Service, a NetworkPolicy clause, ...). A stage may put flows into any table; it
// declares the tables that exist because of it.
//
// The stages of kovs are listed once, in Stages. Adding a stage is a file that returns
// its Stage and one line there: compilation (Registry.Compile, Compiler), the golden
// files, the tracer and the invariant tests then cover it without being told.
type Stage struct {
	Name     string
	Category Category
	Tables   []Table
	// Groups says that the stage compiles OpenFlow groups. Their IDs carry the stage's
	// category in the top byte (as ServiceGroupBase does), so the flow sync knows every
	// such group on the switch as kovs's.
	Groups bool
	// Objects lists the stage's objects in s, in a stable order, with keys unique in the
	// stage. It reads s and nothing else, and compiles nothing: each object's Compile
	// does that, only when the object's Input changed.
	Objects func(s *Snapshot) []Object
}

// Object is one owner of flows and groups within a stage.
type Object struct {
	// Key names the object in its stage, e.g. a pod's ofport or a Service's
	// namespace/name.
	Key string
	// Input is everything the object's flows depend on besides the node, the round and
	// the registry's tables. An object whose key and Input (compared with
	// reflect.DeepEqual, which is quick for a slice the state never changed in place)
	// are as at the last compilation keeps the flows compiled then.
	Input any
	// Compile builds the object's flows and groups.
	Compile func(b *Builder) (ObjectFlows, error)
}

// ObjectFlows are what one object compiles to.
type ObjectFlows struct {
	Flows  []Flow
	Groups []Group
}

// Snapshot is everything the stages read about one node at one moment. Nothing in it is
// changed after it is taken: a new state is a new snapshot.
type Snapshot struct {
	Node  NodeConfig
	Round Round
	// Pods are the local pods' ports in a stable order (the agent's: by port name).
	Pods []PodPort
	// Peers are the tunnel peers, sorted by node name.
	Peers []TunnelPeer
	// Policy is the node's NetworkPolicy share; nil when NetworkPolicy is not enforced.
	Policy *policy.NodeShare
	// Services are the Service ports by Service (namespace/name); a Service's slice is
	// replaced, never changed in place, when its ports change.
	Services map[string][]ServicePort
	// Egress is the node's share of the Egresses; nil without any.
	Egress *EgressState
	// Audit is what the policy stages log (docs/audit.md); nil logs nothing.
	Audit *Audit
}

// Registry is the pipeline's stages, in the order their objects are compiled.
type Registry struct{ stages []Stage }

// Stages is the pipeline of kovs: one line per stage.
func Stages() Registry {
	return Registry{stages: []Stage{
		baseStage(),
		gatewayStage(),
		podStage(),
		tunnelPeerStage(),
		serviceStage(),
		policyStage(),
		clusterPolicyStage(),
		egressStage(),
	}}
}

// With is the registry with more stages after its own.
func (r Registry) With(stages ...Stage) Registry {
	return Registry{stages: slices.Concat(r.stages, stages)}
}

// Stages are the registry's stages, in order.
func (r Registry) Stages() []Stage { return slices.Clone(r.stages) }

// Stage is the stage of category cat.
func (r Registry) Stage(cat Category) (Stage, bool) {
	i := slices.IndexFunc(r.stages, func(s Stage) bool { return s.Category == cat })
	if i < 0 {
		return Stage{}, false
	}
	return r.stages[i], true
}

// Tables are every stage's tables, in pipeline order (by ID).
func (r Registry) Tables() []Table {
	var tables []Table
	for _, s := range r.stages {
		tables = append(tables, s.Tables...)
	}
	slices.SortFunc(tables, func(a, b Table) int { return cmp.Compare(a.ID, b.ID) })
	return tables
}

// TableByID finds a table of the registry by number.
func (r Registry) TableByID(id uint8) (Table, bool) {
	for _, s := range r.stages {
		for _, t := range s.Tables {
			if t.ID == id {
				return t, true
			}
		}
	}
	return Table{}, false
}

// OwnsGroup reports whether group id is kovs's: a stage with groups has the category in
// the ID's top byte.
func (r Registry) OwnsGroup(id uint32) bool {
	return slices.ContainsFunc(r.stages, func(s Stage) bool { return s.Groups && Category(id>>24) == s.Category })
}

// StageOfTable is the stage that declares table id.
func (r Registry) StageOfTable(id uint8) (Stage, bool) {
	for _, s := range r.stages {
		if slices.ContainsFunc(s.Tables, func(t Table) bool { return t.ID == id }) {
			return s, true
		}
	}
	return Stage{}, false
}

// Validate checks that stages and tables do not collide: names, categories and table
// numbers and names are unique, categories are kovs-owned and not the switch's own
// (CategoryLearned), every stage lists its objects, the last table drops its misses and
// a MissJump table jumps to a later table of the registry.
func (r Registry) Validate() error {
	names, cats := map[string]bool{}, map[Category]bool{}
	for _, s := range r.stages {
		switch {
		case s.Name == "" || names[s.Name]:
			return fmt.Errorf("stage name %q is empty or taken", s.Name)
		case s.Category == 0 || s.Category&CategoryLearned != 0 || cats[s.Category]:
			return fmt.Errorf("stage %s: category %d is zero, has the learned flows' bit (%#x) or is another stage's", s.Name, s.Category, CategoryLearned)
		case s.Objects == nil:
			return fmt.Errorf("stage %s: no Objects", s.Name)
		}
		names[s.Name], cats[s.Category] = true, true
	}
	return validateTables(r.Tables())
}

func validateTables(tables []Table) error {
	if len(tables) == 0 {
		return errors.New("no tables")
	}
	names := map[string]bool{}
	for i, t := range tables {
		if i > 0 && t.ID == tables[i-1].ID {
			return fmt.Errorf("tables %s and %s share number %d", tables[i-1].Name, t.Name, t.ID)
		}
		if t.Name == "" || names[t.Name] {
			return fmt.Errorf("table %d: name %q is empty or taken", t.ID, t.Name)
		}
		names[t.Name] = true
		if t.Miss == MissJump {
			if next, ok := t.missTargetIn(tables); !ok || next.ID <= t.ID {
				return fmt.Errorf("table %s: its misses jump to table %d, which is no later table", t.Name, t.MissTo)
			}
		}
	}
	if last := tables[len(tables)-1]; last.Miss != MissDrop {
		return fmt.Errorf("the last table, %s, must drop its misses", last.Name)
	}
	return nil
}
