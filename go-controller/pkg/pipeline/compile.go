package pipeline

import (
	"cmp"
	"fmt"
	"maps"
	"reflect"
	"slices"

	"github.com/kovs-net/kovs/go-controller/pkg/ovs"
)

// Compiled is every flow and group of a snapshot, as typed values: what the golden
// files, the tracer and the tests read.
type Compiled struct {
	Flows  []Flow  // sorted (SortFlows)
	Groups []Group // sorted by ID
	// Conflicts lists flows that two objects compiled differently under the same table,
	// priority and match; the first one's is kept. A correct pipeline has none.
	Conflicts []string
}

// Compile compiles every object of every stage of the registry from scratch. The agent
// compiles through a Compiler, which keeps unchanged objects' flows; both run the same
// objects through the same code.
func (r Registry) Compile(s Snapshot) (Compiled, error) {
	c := NewCompiler(r)
	c.keepTyped = true
	if _, err := c.Compile(s); err != nil {
		return Compiled{}, err
	}
	return c.typed, nil
}

// Desired is what a node wants on its switch: flows by what OpenFlow identifies them by,
// and groups by ID, as the switch holds them (pkg/ovs values).
type Desired struct {
	Flows  map[ovs.FlowKey]ovs.Flow
	Groups map[uint32]ovs.Group
	// Conflicts are as in Compiled.
	Conflicts []string
	// Compiled counts the objects this compilation compiled; Kept those whose flows it
	// kept from the previous one.
	Compiled, Kept int
}

// Compiler compiles snapshots of one node for the flow sync. It keeps every object's flows
// and groups, rendered for the switch, and compiles an object again only when its Input
// changed (or the node, the round): a change to one pod, Service or NetworkPolicy clause
// compiles and renders that object only. It is not safe for concurrent use.
type Compiler struct {
	registry  Registry
	tables    []Table
	keepTyped bool
	node      *NodeConfig // what the cache was compiled for
	round     Round
	cache     map[objectID]*compiledObject
	typed     Compiled // the last compilation, when keepTyped
}

type objectID struct {
	category Category
	key      string
}

// compiledObject is one object's flows and groups as the switch holds them (and, for
// Registry.Compile, as typed values).
type compiledObject struct {
	input  any
	flows  []ovs.Flow
	groups []ovs.Group
	out    ObjectFlows
}

// NewCompiler returns a compiler of the registry's stages with nothing compiled yet.
func NewCompiler(r Registry) *Compiler {
	return &Compiler{registry: r, tables: r.Tables(), cache: map[objectID]*compiledObject{}}
}

// Compile compiles the snapshot: every stage's objects in registry order, each from its
// cached flows when its Input is unchanged. Flows that several objects compile the same
// way (a pod's hairpin flows, for each Service it serves) are installed once.
func (c *Compiler) Compile(s Snapshot) (Desired, error) {
	if c.node == nil || c.round != s.Round || !reflect.DeepEqual(*c.node, s.Node) {
		node := s.Node.clone()
		c.node, c.round, c.cache = &node, s.Round, map[objectID]*compiledObject{}
	}
	b, err := newBuilder(s.Node, s.Round, c.tables)
	if err != nil {
		return Desired{}, err
	}
	a := newAssembly(len(c.cache), c.keepTyped)
	seen := make(map[objectID]bool, len(c.cache))
	for _, st := range c.registry.stages {
		for _, obj := range st.Objects(&s) {
			id := objectID{st.Category, obj.Key}
			if seen[id] {
				return Desired{}, fmt.Errorf("stage %s: two objects with key %q", st.Name, obj.Key)
			}
			seen[id] = true
			e, kept, err := c.object(b, st, id, obj)
			if err != nil {
				return Desired{}, err
			}
			a.add(st, obj.Key, e, kept)
		}
	}
	maps.DeleteFunc(c.cache, func(id objectID, _ *compiledObject) bool { return !seen[id] })
	if c.keepTyped {
		c.typed = a.compiled()
	}
	return a.desired, nil
}

// object returns obj's compiled flows, compiling them unless the cache has them for the
// same Input.
func (c *Compiler) object(b *Builder, st Stage, id objectID, obj Object) (e *compiledObject, kept bool, err error) {
	if e, ok := c.cache[id]; ok && reflect.DeepEqual(e.input, obj.Input) {
		return e, true, nil
	}
	out, err := obj.Compile(b)
	if err != nil {
		return nil, false, fmt.Errorf("stage %s, %s: %w", st.Name, obj.Key, err)
	}
	e = &compiledObject{input: obj.Input, flows: make([]ovs.Flow, len(out.Flows)), groups: make([]ovs.Group, len(out.Groups))}
	for i, f := range out.Flows {
		if f.Cookie.Category() != st.Category {
			return nil, false, fmt.Errorf("stage %s, %s: flow %s has the cookie of category %d, not the stage's %d",
				st.Name, obj.Key, f, f.Cookie.Category(), st.Category)
		}
		e.flows[i] = f.Rendered()
	}
	for i, g := range out.Groups {
		if !st.Groups || Category(g.ID>>24) != st.Category {
			return nil, false, fmt.Errorf("stage %s, %s: group %#x is not the stage's (groups of a stage with Groups, its category in the top byte)",
				st.Name, obj.Key, g.ID)
		}
		e.groups[i] = g.Rendered()
	}
	if c.keepTyped {
		e.out = out
	}
	c.cache[id] = e
	return e, false, nil
}

// assembly gathers the objects' flows into one desired state.
type assembly struct {
	desired    Desired
	keepTyped  bool
	typedFlows map[ovs.FlowKey]Flow
	typedGroup map[uint32]Group
}

func newAssembly(objects int, keepTyped bool) *assembly {
	a := &assembly{desired: Desired{Flows: make(map[ovs.FlowKey]ovs.Flow, 8*objects), Groups: map[uint32]ovs.Group{}},
		keepTyped: keepTyped}
	if keepTyped {
		a.typedFlows, a.typedGroup = map[ovs.FlowKey]Flow{}, map[uint32]Group{}
	}
	return a
}

func (a *assembly) add(st Stage, key string, e *compiledObject, kept bool) {
	if kept {
		a.desired.Kept++
	} else {
		a.desired.Compiled++
	}
	for i, f := range e.flows {
		if have, ok := a.desired.Flows[f.FlowKey]; ok {
			if have != f {
				a.desired.Conflicts = append(a.desired.Conflicts,
					fmt.Sprintf("stage %s, %s: %s, but another object compiled %s", st.Name, key, f, have))
			}
			continue
		}
		a.desired.Flows[f.FlowKey] = f
		if a.keepTyped {
			a.typedFlows[f.FlowKey] = e.out.Flows[i]
		}
	}
	for i, g := range e.groups {
		if _, ok := a.desired.Groups[g.ID]; ok {
			continue
		}
		a.desired.Groups[g.ID] = g
		if a.keepTyped {
			a.typedGroup[g.ID] = e.out.Groups[i]
		}
	}
}

// compiled is the assembly as typed values.
func (a *assembly) compiled() Compiled {
	flows := slices.Collect(maps.Values(a.typedFlows))
	SortFlows(flows)
	groups := slices.Collect(maps.Values(a.typedGroup))
	slices.SortFunc(groups, func(x, y Group) int { return cmp.Compare(x.ID, y.ID) })
	return Compiled{Flows: flows, Groups: groups, Conflicts: a.desired.Conflicts}
}

// Desire is the desired state of flows and groups compiled elsewhere (a test's, a
// benchmark's), as the switch holds them.
func Desire(flows []Flow, groups []Group) Desired {
	d := Desired{Flows: make(map[ovs.FlowKey]ovs.Flow, len(flows)), Groups: make(map[uint32]ovs.Group, len(groups))}
	for _, f := range flows {
		r := f.Rendered()
		d.Flows[r.FlowKey] = r
	}
	for _, g := range groups {
		d.Groups[g.ID] = g.Rendered()
	}
	return d
}

// ObjectFlows are the flows the compiler keeps for the object of category cat and key,
// as the switch holds them; ok is false when it keeps none (never compiled, or gone).
func (c *Compiler) ObjectFlows(cat Category, key string) (flows []ovs.Flow, ok bool) {
	e, ok := c.cache[objectID{cat, key}]
	if !ok {
		return nil, false
	}
	return e.flows, true
}
