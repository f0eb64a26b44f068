package pipeline

import (
	"fmt"
	"slices"
)

// Table is one OpenFlow table of br-int: a fixed number, a name that dump-flows and traces
// are read against, the phase of a packet's path it belongs to and what happens to a
// packet no flow matches.
type Table struct {
	ID    uint8
	Name  string
	Phase Phase
	Miss  MissAction
	// MissTo is the table a MissJump table's misses continue in (by ID: a Table cannot
	// hold a Table).
	MissTo uint8
}

// MissAction is what a table's priority-0 flow does.
type MissAction uint8

// Miss actions.
const (
	MissDrop MissAction = iota // drop the packet
	MissNext                   // continue in the next table of the pipeline
	MissJump                   // continue in table MissTo, skipping the tables between
)

func (m MissAction) String() string {
	switch m {
	case MissNext:
		return "next table"
	case MissJump:
		return "jump"
	}
	return "drop"
}

// Phase is a step of a packet's path through br-int (classification, spoof guard, ...);
// one or more tables make a phase. The golden files' table headings print it as
// "stage:", the name it had before stages became the values that compile flows.
type Phase uint8

// Phases in pipeline order.
const (
	PhaseClassification Phase = iota + 1
	PhaseSpoofGuard
	PhaseNeighbor
	PhaseConntrack
	PhaseServiceLB
	PhaseEgressPolicy
	PhaseRouting
	PhaseIngressPolicy
	PhaseOutput
)

func (s Phase) String() string {
	switch s {
	case PhaseClassification:
		return "classification"
	case PhaseSpoofGuard:
		return "spoof guard"
	case PhaseNeighbor:
		return "ARP/ND"
	case PhaseConntrack:
		return "conntrack"
	case PhaseServiceLB:
		return "service load balancing"
	case PhaseEgressPolicy:
		return "egress policy"
	case PhaseRouting:
		return "L3 forwarding"
	case PhaseIngressPolicy:
		return "ingress policy"
	case PhaseOutput:
		return "output"
	}
	return fmt.Sprintf("phase(%d)", uint8(s))
}

// The tables of br-int, declared once (never written after initialisation). IDs leave gaps
// so later stages slot in by name: 40-47 Service load balancing, 48-59 egress policy tables
// (48 and 55: ClusterNetworkPolicy, flows_cluster.go), 65-79 ingress policy tables (65 and
// 75: ClusterNetworkPolicy).
var (
	Classifier      = Table{ID: 0, Name: "Classifier", Phase: PhaseClassification, Miss: MissDrop}
	SpoofGuard      = Table{ID: 10, Name: "SpoofGuard", Phase: PhaseSpoofGuard, Miss: MissDrop}
	ARPResponder    = Table{ID: 20, Name: "ARPResponder", Phase: PhaseNeighbor, Miss: MissDrop}
	NDResponder     = Table{ID: 21, Name: "NDResponder", Phase: PhaseNeighbor, Miss: MissNext}
	NDReply         = Table{ID: 22, Name: "NDReply", Phase: PhaseNeighbor, Miss: MissNext}
	ConntrackZone   = Table{ID: 30, Name: "ConntrackZone", Phase: PhaseConntrack, Miss: MissDrop}
	ConntrackState  = Table{ID: 31, Name: "ConntrackState", Phase: PhaseConntrack, Miss: MissJump, MissTo: 40}
	SCTPReply       = Table{ID: 32, Name: "SCTPReply", Phase: PhaseConntrack, Miss: MissDrop} // resubmit only
	ServiceLB       = Table{ID: 40, Name: "ServiceLB", Phase: PhaseServiceLB, Miss: MissJump, MissTo: 48}
	ServiceAffinity = Table{ID: 41, Name: "ServiceAffinity", Phase: PhaseServiceLB, Miss: MissDrop}
	EndpointDNAT    = Table{ID: 43, Name: "EndpointDNAT", Phase: PhaseServiceLB, Miss: MissDrop}
	ServiceHairpin  = Table{ID: 44, Name: "ServiceHairpin", Phase: PhaseServiceLB, Miss: MissJump, MissTo: 48}
	HairpinUnSNAT   = Table{ID: 45, Name: "HairpinUnSNAT", Phase: PhaseServiceLB, Miss: MissDrop}
	SCTPUnNAT       = Table{ID: 46, Name: "SCTPUnNAT", Phase: PhaseServiceLB, Miss: MissDrop} // resubmit only
	SCTPPin         = Table{ID: 47, Name: "SCTPPin", Phase: PhaseServiceLB, Miss: MissDrop}   // resubmit only
	EgressPolicy    = Table{ID: 50, Name: "EgressPolicy", Phase: PhaseEgressPolicy, Miss: MissNext}
	L3Forwarding    = Table{ID: 60, Name: "L3Forwarding", Phase: PhaseRouting, Miss: MissDrop}
	L3DecTTL        = Table{ID: 61, Name: "L3DecTTL", Phase: PhaseRouting, Miss: MissDrop}
	IngressPolicy   = Table{ID: 70, Name: "IngressPolicy", Phase: PhaseIngressPolicy, Miss: MissNext}
	ConntrackCommit = Table{ID: 80, Name: "ConntrackCommit", Phase: PhaseOutput, Miss: MissNext}
	Output          = Table{ID: 90, Name: "Output", Phase: PhaseOutput, Miss: MissDrop}
)

// Tables returns the pipeline's tables in order: those the stages of Stages declare.
func Tables() []Table { return Stages().Tables() }

// missTarget is where a MissNext or MissJump table of the kovs pipeline sends unmatched
// packets.
func (t Table) missTarget() (Table, bool) { return t.missTargetIn(Tables()) }

// missTargetIn is where t sends unmatched packets in a pipeline of tables (in order).
func (t Table) missTargetIn(tables []Table) (Table, bool) {
	switch t.Miss {
	case MissJump:
		i := slices.IndexFunc(tables, func(tt Table) bool { return tt.ID == t.MissTo })
		if i < 0 {
			return Table{}, false
		}
		return tables[i], true
	case MissNext:
		for i, tt := range tables[:len(tables)-1] {
			if tt == t {
				return tables[i+1], true
			}
		}
	}
	return Table{}, false
}

// TableByID finds a table of the kovs pipeline by number, e.g. to name the tables of a
// dump.
func TableByID(id uint8) (Table, bool) { return Stages().TableByID(id) }

func (t Table) String() string { return fmt.Sprintf("%d(%s)", t.ID, t.Name) }
