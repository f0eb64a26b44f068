package pipeline

import (
	"slices"
	"strings"
	"testing"
)

// conjTable is a tiny pipeline for the tracer's conjunctive lookups: Classifier sends
// everything to EgressPolicy, where the flows under test output to a port that names them.
func conjTable(flows ...Flow) *Tracer {
	all := []Flow{{Table: Classifier, Priority: 1, Match: MatchAll(), Actions: []Action{Goto(EgressPolicy)}}}
	for _, f := range flows {
		f.Table = EgressPolicy
		all = append(all, f)
	}
	return NewTracer(all)
}

func clause(prio uint16, m Match, conj ...Conjunction) Flow {
	actions := make([]Action, len(conj))
	for i, c := range conj {
		actions[i] = c
	}
	return Flow{Priority: prio, Match: m, Actions: actions}
}

func outputFlow(prio uint16, m Match, port uint32) Flow {
	return Flow{Priority: prio, Match: m, Actions: []Action{OutputPort{Port: port}}}
}

func TestTracerConjunctions(t *testing.T) {
	pkt := transportPacket(5, ip("10.0.0.1"), ip("10.0.0.2"), IPProtoTCP, 80)
	fromPort5 := MatchAll().InPort(5)
	fromSrc := MatchProtocol(ProtoIPv4).IPSrc(host(ip("10.0.0.1")))
	toPort80 := MatchProtocol(ProtoTCP).TpDst(80, 0xffff)
	toPort81 := MatchProtocol(ProtoTCP).TpDst(81, 0xffff)
	c := func(id uint32, k, n uint8) Conjunction { return Conjunction{ID: id, Clause: k, NClauses: n} }
	fallback := outputFlow(10, fromPort5, 99)
	for _, tc := range []struct {
		name     string
		flows    []Flow
		wantPort uint32
		wantConj []uint32
	}{
		{"every clause matches", []Flow{clause(100, fromPort5, c(1, 1, 2)), clause(100, toPort80, c(1, 2, 2)),
			outputFlow(100, MatchAll().ConjID(1), 11), fallback}, 11, []uint32{1}},
		{"a clause does not match", []Flow{clause(100, fromPort5, c(1, 1, 2)), clause(100, toPort81, c(1, 2, 2)),
			outputFlow(100, MatchAll().ConjID(1), 11), fallback}, 99, nil},
		{"no conj_id flow: as if the conjunction had not matched", []Flow{clause(100, fromPort5, c(1, 1, 2)),
			clause(100, toPort80, c(1, 2, 2)), fallback}, 99, nil},
		{"a higher ordinary flow wins", []Flow{clause(100, fromPort5, c(1, 1, 2)), clause(100, toPort80, c(1, 2, 2)),
			outputFlow(100, MatchAll().ConjID(1), 11), outputFlow(200, fromSrc, 22)}, 22, nil},
		{"two conjunctions complete: all reported, the lowest followed", []Flow{
			clause(100, fromPort5, c(7, 1, 2), c(3, 1, 3)), clause(100, toPort80, c(7, 2, 2), c(3, 3, 3)),
			clause(100, fromSrc, c(3, 2, 3)), outputFlow(100, MatchAll().ConjID(3), 13), outputFlow(100, MatchAll().ConjID(7), 17),
			fallback}, 13, []uint32{3, 7}},
		{"an incomplete higher conjunction yields to a lower complete one", []Flow{
			clause(200, fromPort5, c(2, 1, 2)), clause(200, toPort81, c(2, 2, 2)), outputFlow(200, MatchAll().ConjID(2), 12),
			clause(100, fromPort5, c(1, 1, 2)), clause(100, fromSrc, c(1, 2, 2)), outputFlow(100, MatchAll().ConjID(1), 11),
			fallback}, 11, []uint32{1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := trace(t, conjTable(tc.flows...), pkt, CTNew)
			wantDelivered(t, r, tc.wantPort)
			if got := r.Steps[len(r.Steps)-1].Conjunctions; !slices.Equal(got, tc.wantConj) {
				t.Errorf("conjunctions = %v, want %v\n%s", got, tc.wantConj, r)
			}
		})
	}
}

func TestTracerRefusesClausesBesideOrdinaryFlows(t *testing.T) {
	pkt := transportPacket(5, ip("10.0.0.1"), ip("10.0.0.2"), IPProtoTCP, 80)
	tr := conjTable(clause(100, MatchAll().InPort(5), Conjunction{ID: 1, Clause: 1, NClauses: 2}),
		outputFlow(100, MatchProtocol(ProtoIPv4), 9))
	if _, err := tr.Trace(pkt, CTNew); err == nil || !strings.Contains(err.Error(), "clause flows and an ordinary flow") {
		t.Errorf("trace error = %v, want a refusal to guess", err)
	}
}
