package pipeline

import (
	"bytes"
	"fmt"
	"slices"
	"strings"
)

// maxTraceSteps bounds a trace; the pipeline only jumps forward, so a real trace visits
// each table at most once.
const maxTraceSteps = 64

// Tracer runs synthetic packets through a compiled flow set, table by table and highest
// priority first, the way `ovs-appctl ofproto/trace` runs them through br-int. It models
// the fields and actions the pipeline emits; conntrack is an assumption the caller makes.
type Tracer struct {
	tables map[uint8][]Flow // each highest priority first
	groups map[uint32]Group
	conns  *traceConntrack
}

// NewTracer indexes flows for tracing.
func NewTracer(flows []Flow) *Tracer {
	t := &Tracer{tables: map[uint8][]Flow{}, groups: map[uint32]Group{}, conns: &traceConntrack{}}
	for _, f := range flows {
		t.tables[f.Table.ID] = append(t.tables[f.Table.ID], f)
	}
	for id := range t.tables {
		SortFlows(t.tables[id])
	}
	return t
}

// Result is where a traced packet went and why.
type Result struct {
	Steps   []Step     // one per table visited, in order
	Outputs []Delivery // packets sent, with their headers as they left
	Commits []uint16   // conntrack zones the connection was committed to
	Buckets []string   // the group buckets chosen, as "group G bucket B"
	NAT     []string   // address translations conntrack applied
	End     string     // why processing stopped
	// Audited are the copies sent to the agent's audit log (controller actions).
	Audited []Controller
}

// Step is one table lookup and the flow that won it. When the flow was found through a
// conjunctive match, Conjunctions lists every conjunction that completed at the winning
// priority (OVS follows one of them; the tracer the lowest ID) and Flow is the conj_id
// flow of the one followed.
type Step struct {
	Table        Table
	Flow         Flow
	Matched      bool
	Conjunctions []uint32
}

// Delivery is a packet leaving br-int through Port.
type Delivery struct {
	Port   uint32
	Packet Packet
}

// Dropped reports whether the packet left through no port.
func (r Result) Dropped() bool { return len(r.Outputs) == 0 }

// TableNames are the names of the tables visited, in order.
func (r Result) TableNames() []string {
	names := make([]string, len(r.Steps))
	for i, s := range r.Steps {
		names[i] = s.Table.Name
	}
	return names
}

// String prints the trace: one line per table with the flow that matched, then the
// deliveries and why processing ended.
func (r Result) String() string {
	var b strings.Builder
	for _, s := range r.Steps {
		switch {
		case !s.Matched:
			fmt.Fprintf(&b, "%3d %-16s (no flow matched)\n", s.Table.ID, s.Table.Name)
		case len(s.Conjunctions) > 0:
			fmt.Fprintf(&b, "%3d %-16s %s   (conjunctions %v)\n", s.Table.ID, s.Table.Name, s.Flow, s.Conjunctions)
		default:
			fmt.Fprintf(&b, "%3d %-16s %s\n", s.Table.ID, s.Table.Name, s.Flow)
		}
	}
	for _, d := range r.Outputs {
		fmt.Fprintf(&b, "    => output:%d %s\n", d.Port, d.Packet)
	}
	for _, z := range r.Commits {
		fmt.Fprintf(&b, "    => committed to conntrack zone %d\n", z)
	}
	for _, g := range r.Buckets {
		fmt.Fprintf(&b, "    => %s\n", g)
	}
	for _, n := range r.NAT {
		fmt.Fprintf(&b, "    => nat %s\n", n)
	}
	fmt.Fprintf(&b, "    end: %s\n", r.End)
	return b.String()
}

// traceState is the packet and its pipeline metadata during a trace.
type traceState struct {
	pkt    Packet
	regs   [5]uint32
	ct     CTFlags // 0 until a ct() action recirculates the packet
	ctNext CTFlags
	conjID uint32 // set only while a lookup looks for a conj_id flow
	tr     *Tracer
	depth  int // resubmit and group nesting
	// recirculated is set when a ct action recirculated the packet.
	recirculated bool
	ctMark       uint32 // the connection's ct_mark, as the last ct() action found it
}

// Trace runs pkt through the pipeline from Classifier. ctNext is the ct_state conntrack
// reports when a ct() action recirculates the packet, like ofproto/trace --ct-next
// (CTTracked is implied): CTNew for a first packet, CTEstablished for a reply.
func (t *Tracer) Trace(pkt Packet, ctNext CTFlags) (Result, error) {
	st := &traceState{pkt: pkt, ctNext: ctNext | CTTracked, tr: t}
	var r Result
	table, more := Classifier, true
	for more {
		if len(r.Steps) == maxTraceSteps {
			return r, fmt.Errorf("trace of %s: more than %d tables", pkt, maxTraceSteps)
		}
		flow, conj, found, err := t.lookup(table, st)
		if err != nil {
			return r, fmt.Errorf("trace of %s: %w", pkt, err)
		}
		r.Steps = append(r.Steps, Step{Table: table, Flow: flow, Matched: found, Conjunctions: conj})
		if !found {
			r.End = "table miss with no flow: drop"
			return r, nil
		}
		next, cont, err := st.execute(flow.Actions, &r)
		if err != nil {
			return r, fmt.Errorf("trace of %s in table %s: %w", pkt, table.Name, err)
		}
		table, more = next, cont
	}
	return r, nil
}

func (st *traceState) matches(m Match) bool {
	if !st.pkt.matches(m.proto) {
		return false
	}
	for _, fm := range m.fields {
		got := st.get(fm.field)
		for i := range got {
			if got[i]&fm.mask[i] != fm.value[i]&fm.mask[i] {
				return false
			}
		}
	}
	return true
}

// execute runs a flow's actions. It returns the table to continue in, if any.
func (st *traceState) execute(actions []Action, r *Result) (Table, bool, error) {
	for _, a := range actions {
		switch a := a.(type) {
		case GotoTable:
			return a.Table, true, nil
		case CT:
			if a.Commit {
				r.Commits = append(r.Commits, a.Zone)
			}
			dnat := st.conntrackNAT(a, r)
			if a.Recirculate {
				st.recirculated = true
				st.ct = st.ctNext
				if dnat {
					st.ct |= CTDNAT
				}
				return a.Table, true, nil
			}
		case OutputPort:
			st.output(a.Port, false, r)
		case OutputInPort:
			st.output(st.pkt.InPort, true, r)
		case OutputReg:
			value := uint32(beUint(st.get(a.Field.field())))
			st.output((value&a.Field.mask())>>a.Field.Start, false, r)
		case SetField:
			st.set(a.Field, a.Value, a.Mask)
		case Move:
			if err := st.move(a); err != nil {
				return Table{}, false, err
			}
		case Meter:
			// A rate limit: a single packet is within it.
		case Controller:
			// A copy to the agent: the packet itself goes on unchanged.
			r.Audited = append(r.Audited, a)
		case DecTTL:
			if st.pkt.TTL <= 1 {
				r.End = "dec_ttl: TTL expired, dropped"
				return Table{}, false, nil
			}
			st.pkt.TTL--
		case Drop:
			r.End = "drop"
			return Table{}, false, nil
		case Conjunction:
			return Table{}, false, fmt.Errorf("%s executed: clause flows only take part in lookups", a)
		case LearnSCTPReply:
			st.tr.learn(a.LearnedFlow(st.pkt))
		case LearnSCTPUnNAT:
			st.tr.learn(a.LearnedFlow(st.pkt))
		case LearnSCTPPin:
			st.tr.learn(a.LearnedFlow(st.pkt))
		case SetSCTPPort:
			if a.Src {
				st.pkt.SrcPort = a.Port
			} else {
				st.pkt.DstPort = a.Port
			}
		case Resubmit, GroupOutput, LearnAffinity:
			next, cont, err := st.executeService(a, r)
			if err != nil || cont {
				return next, cont, err
			}
		default:
			return Table{}, false, fmt.Errorf("tracer cannot execute %s", a)
		}
	}
	if r.End == "" {
		r.End = "actions done"
	}
	return Table{}, false, nil
}

// output sends a copy of the packet out port. Like OVS, it never sends a packet back out
// its ingress port except through IN_PORT.
func (st *traceState) output(port uint32, inPort bool, r *Result) {
	if port == st.pkt.InPort && !inPort {
		r.End = fmt.Sprintf("output to ingress port %d skipped", port)
		return
	}
	r.Outputs = append(r.Outputs, Delivery{Port: port, Packet: st.pkt})
	r.End = "output"
}

func (st *traceState) move(m Move) error {
	src := st.get(m.Src)
	if len(src) != m.Dst.spec().width {
		return fmt.Errorf("move %s: fields differ in width", m)
	}
	st.set(m.Dst, src, allOnes(len(src)))
	return nil
}

func isReg(f Field) bool { return (f >= FieldReg0 && f <= FieldReg3) || f == FieldReg4 }

// regIndex is the register number of a register field.
func regIndex(f Field) int {
	if f == FieldReg4 {
		return 4
	}
	return int(f - FieldReg0)
}

func (st *traceState) get(f Field) []byte {
	switch {
	case isReg(f):
		return uintValue(uint64(st.regs[regIndex(f)]), 4)
	case f == FieldCTState:
		return uintValue(uint64(st.ct), 4)
	case f == FieldCTMark:
		return uintValue(uint64(st.ctMark), 4)
	case f == FieldConjID:
		return uintValue(uint64(st.conjID), 4)
	}
	return st.pkt.get(f)
}

// set writes value under mask into field f.
func (st *traceState) set(f Field, value, mask []byte) {
	merged := slices.Clone(st.get(f))
	for i := range merged {
		merged[i] = merged[i]&^mask[i] | value[i]&mask[i]
	}
	switch {
	case isReg(f):
		st.regs[regIndex(f)] = uint32(beUint(merged))
	case f == FieldCTState:
		st.ct = CTFlags(beUint(merged))
	case !bytes.Equal(merged, st.pkt.get(f)):
		st.pkt.set(f, merged)
	}
}
