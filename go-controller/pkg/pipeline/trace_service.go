package pipeline

import (
	"fmt"
	"hash/fnv"
	"net/netip"
	"slices"
)

// maxTraceDepth bounds resubmit and group nesting, as OVS bounds resubmits.
const maxTraceDepth = 8

// WithGroups makes the groups known to the tracer (group:N actions run one of their
// buckets) and returns the tracer.
func (t *Tracer) WithGroups(groups []Group) *Tracer {
	for _, g := range groups {
		t.groups[g.ID] = g
	}
	return t
}

// Learned are the flows learn actions added during the traces so far.
func (t *Tracer) Learned() []Flow {
	var out []Flow
	for _, flows := range t.tables {
		for _, f := range flows {
			if f.Cookie == 0 {
				out = append(out, f)
			}
		}
	}
	SortFlows(out)
	return out
}

// executeService runs the Service actions: a resubmit or a group runs nested actions (a
// recirculation inside them ends the current action list, like OVS's ct(table=N)); learn
// adds a flow for later traces.
func (st *traceState) executeService(a Action, r *Result) (Table, bool, error) {
	if st.depth >= maxTraceDepth {
		return Table{}, false, fmt.Errorf("%s: nested more than %d deep", a, maxTraceDepth)
	}
	st.depth++
	defer func() { st.depth-- }()
	switch a := a.(type) {
	case Resubmit:
		return st.resubmit(a.Table, r)
	case GroupOutput:
		g, ok := st.tr.groups[a.ID]
		if !ok {
			return Table{}, false, fmt.Errorf("group %d does not exist", a.ID)
		}
		if len(g.Buckets) == 0 {
			r.End = fmt.Sprintf("group %d has no buckets: drop", a.ID)
			return Table{}, false, nil
		}
		i := st.pkt.bucketHash() % uint32(len(g.Buckets))
		r.Buckets = append(r.Buckets, fmt.Sprintf("group %d bucket %d", a.ID, i))
		return st.nested(g.Buckets[i], r)
	case LearnAffinity:
		st.tr.learn(st.learnedFlow(a))
	}
	return Table{}, false, nil
}

// resubmit looks table up and runs the flow found, then returns to the caller's actions.
func (st *traceState) resubmit(table Table, r *Result) (Table, bool, error) {
	for steps := 0; steps < maxTraceSteps; steps++ {
		flow, conj, found, err := st.tr.lookup(table, st)
		if err != nil {
			return Table{}, false, err
		}
		r.Steps = append(r.Steps, Step{Table: table, Flow: flow, Matched: found, Conjunctions: conj})
		if !found {
			return Table{}, false, nil
		}
		next, cont, recirculated, err := st.nestedFlow(flow.Actions, r)
		if err != nil || !cont || recirculated {
			return next, cont, err
		}
		table = next // a goto_table inside a resubmit continues the lookup there
	}
	return Table{}, false, fmt.Errorf("resubmit to %s: too many tables", table.Name)
}

// nested runs a bucket's actions; only a recirculation continues the pipeline.
func (st *traceState) nested(actions []Action, r *Result) (Table, bool, error) {
	next, cont, recirculated, err := st.nestedFlow(actions, r)
	if err != nil || !recirculated {
		return Table{}, false, err
	}
	return next, cont, nil
}

// nestedFlow runs actions nested in a resubmit or bucket. An empty or "drop" action list
// ends only the nested list, as in OVS.
func (st *traceState) nestedFlow(actions []Action, r *Result) (Table, bool, bool, error) {
	end := r.End
	st.recirculated = false
	next, cont, err := st.execute(actions, r)
	recirculated := cont && st.recirculated
	if !cont && (r.End == "drop" || r.End == "actions done") {
		r.End = end
	}
	return next, cont, recirculated, err
}

// learnedFlow is the affinity flow a LearnAffinity action learns for the packet.
func (st *traceState) learnedFlow(a LearnAffinity) Flow {
	proto, _ := TransportProtocol(a.IPProto, a.IPv6)
	m := MatchProtocol(proto).IPSrc(host(st.pkt.IPSrc)).IPDst(host(st.pkt.IPDst)).TpDst(st.pkt.DstPort, 0xffff)
	return Flow{Table: a.Table, Priority: a.Priority, Match: m,
		Actions: []Action{LoadReg(EndpointKeyField.Mark(st.regs[3])), LoadReg(AffinityHitField.Mark(1))}}
}

// learn adds (or replaces) a learned flow.
func (t *Tracer) learn(f Flow) {
	flows := slices.DeleteFunc(t.tables[f.Table.ID], func(o Flow) bool {
		return o.Priority == f.Priority && o.Match.String() == f.Match.String()
	})
	t.tables[f.Table.ID] = append(flows, f)
	SortFlows(t.tables[f.Table.ID])
}

// Expire removes the learned flows, as their idle timeout would.
func (t *Tracer) Expire() {
	for id, flows := range t.tables {
		t.tables[id] = slices.DeleteFunc(flows, func(f Flow) bool { return f.Cookie == 0 })
	}
}

// bucketHash stands in for the group's hash of addresses and ports.
func (p *Packet) bucketHash() uint32 {
	h := fnv.New32a()
	h.Write(p.IPSrc.AsSlice())
	h.Write(p.IPDst.AsSlice())
	h.Write([]byte{byte(p.SrcPort >> 8), byte(p.SrcPort), byte(p.DstPort >> 8), byte(p.DstPort), p.IPProto})
	return h.Sum32()
}

// traceConntrack remembers the translations committed during traces, per zone, so ct(nat)
// on later packets of the connection applies them (and un-NATs replies).
type traceConntrack struct {
	conns []traceConn
	marks map[markKey]uint32 // ct_mark of committed connections, by original tuple
}

type markKey struct {
	zone  uint16
	proto uint8
	tuple connTuple
}

type traceConn struct {
	zone       uint16
	proto      uint8
	orig, xlat connTuple // before and after translation
}

type connTuple struct{ src, dst netip.AddrPort }

func (c connTuple) reverse() connTuple { return connTuple{src: c.dst, dst: c.src} }

func (p *Packet) tuple() connTuple {
	return connTuple{src: netip.AddrPortFrom(p.IPSrc, p.SrcPort), dst: netip.AddrPortFrom(p.IPDst, p.DstPort)}
}

func (p *Packet) setTuple(c connTuple) {
	p.IPSrc, p.SrcPort, p.IPDst, p.DstPort = c.src.Addr(), c.src.Port(), c.dst.Addr(), c.dst.Port()
}

// conntrackNAT applies a ct action's translation: a commit with NATDst or NATSrc records
// and applies a new one; a plain nat applies the one of the packet's connection, in
// either direction. It reports whether the connection has its destination translated.
func (st *traceState) conntrackNAT(a CT, r *Result) bool {
	dnat := false
	ct := st.tr.conns
	before := st.pkt.tuple()
	switch {
	case a.Commit && (a.NATDst.IsValid() || a.NATSrc.IsValid()):
		after := before
		if a.NATDst.IsValid() {
			port := a.NATDst.Port()
			if port == 0 {
				port = before.dst.Port()
			}
			after.dst = netip.AddrPortFrom(a.NATDst.Addr(), port)
		} else {
			after.src = netip.AddrPortFrom(a.NATSrc, before.src.Port())
		}
		ct.conns = append(ct.conns, traceConn{zone: a.Zone, proto: st.pkt.IPProto, orig: before, xlat: after})
		st.pkt.setTuple(after)
		dnat = a.NATDst.IsValid()
	case a.NAT:
	conns:
		for _, c := range ct.conns {
			if c.zone != a.Zone || c.proto != st.pkt.IPProto {
				continue
			}
			switch before {
			case c.orig:
				st.pkt.setTuple(c.xlat)
			case c.xlat.reverse():
				st.pkt.setTuple(c.orig.reverse())
			default:
				continue
			}
			dnat = c.orig.dst != c.xlat.dst
			break conns
		}
	}
	if after := st.pkt.tuple(); after != before {
		r.NAT = append(r.NAT, fmt.Sprintf("zone %d: %s>%s -> %s>%s", a.Zone, before.src, before.dst, after.src, after.dst))
	}
	st.conntrackMark(a)
	return dnat
}

// conntrackMark records a commit's ct_mark and loads the mark of the packet's connection.
func (st *traceState) conntrackMark(a CT) {
	ct := st.tr.conns
	if ct.marks == nil {
		ct.marks = map[markKey]uint32{}
	}
	k := markKey{zone: a.Zone, proto: st.pkt.IPProto, tuple: st.pkt.tuple()}
	if a.Commit && a.MarkMask != 0 {
		ct.marks[k] = ct.marks[k]&^a.MarkMask | a.Mark&a.MarkMask
	}
	mark, ok := ct.marks[k]
	if !ok {
		k.tuple = k.tuple.reverse()
		mark = ct.marks[k]
	}
	st.ctMark = mark
}
