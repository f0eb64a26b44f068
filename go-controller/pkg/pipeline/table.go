package pipeline

import "fmt"

// Table is one OpenFlow table of br-int: a fixed number, a name that dump-flows and traces
// are read against, the stage it belongs to and what happens to a packet no flow matches.
type Table struct {
	ID    uint8
	Name  string
	Stage Stage
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

// Stage is a step of the pipeline; a stage owns one or more tables.
type Stage uint8

// Stages in pipeline order.
const (
	StageClassification Stage = iota + 1
	StageSpoofGuard
	StageNeighbor
	StageConntrack
	StageServiceLB
	StageEgressPolicy
	StageRouting
	StageIngressPolicy
	StageOutput
)

func (s Stage) String() string {
	switch s {
	case StageClassification:
		return "classification"
	case StageSpoofGuard:
		return "spoof guard"
	case StageNeighbor:
		return "ARP/ND"
	case StageConntrack:
		return "conntrack"
	case StageServiceLB:
		return "service load balancing"
	case StageEgressPolicy:
		return "egress policy"
	case StageRouting:
		return "L3 forwarding"
	case StageIngressPolicy:
		return "ingress policy"
	case StageOutput:
		return "output"
	}
	return fmt.Sprintf("stage(%d)", uint8(s))
}

// The tables of br-int, declared once (never written after initialisation). IDs leave gaps
// so later stages slot in by name: 40-49 Service load balancing, 51-59 more egress policy
// tables, 71-79 more ingress policy tables.
var (
	Classifier      = Table{ID: 0, Name: "Classifier", Stage: StageClassification, Miss: MissDrop}
	SpoofGuard      = Table{ID: 10, Name: "SpoofGuard", Stage: StageSpoofGuard, Miss: MissDrop}
	ARPResponder    = Table{ID: 20, Name: "ARPResponder", Stage: StageNeighbor, Miss: MissDrop}
	NDResponder     = Table{ID: 21, Name: "NDResponder", Stage: StageNeighbor, Miss: MissNext}
	NDReply         = Table{ID: 22, Name: "NDReply", Stage: StageNeighbor, Miss: MissNext}
	ConntrackZone   = Table{ID: 30, Name: "ConntrackZone", Stage: StageConntrack, Miss: MissDrop}
	ConntrackState  = Table{ID: 31, Name: "ConntrackState", Stage: StageConntrack, Miss: MissJump, MissTo: 40}
	SCTPReply       = Table{ID: 32, Name: "SCTPReply", Stage: StageConntrack, Miss: MissDrop} // resubmit only
	ServiceLB       = Table{ID: 40, Name: "ServiceLB", Stage: StageServiceLB, Miss: MissJump, MissTo: 50}
	ServiceAffinity = Table{ID: 41, Name: "ServiceAffinity", Stage: StageServiceLB, Miss: MissDrop}
	EndpointDNAT    = Table{ID: 43, Name: "EndpointDNAT", Stage: StageServiceLB, Miss: MissDrop}
	ServiceHairpin  = Table{ID: 44, Name: "ServiceHairpin", Stage: StageServiceLB, Miss: MissJump, MissTo: 50}
	HairpinUnSNAT   = Table{ID: 45, Name: "HairpinUnSNAT", Stage: StageServiceLB, Miss: MissDrop}
	SCTPUnNAT       = Table{ID: 46, Name: "SCTPUnNAT", Stage: StageServiceLB, Miss: MissDrop} // resubmit only
	SCTPPin         = Table{ID: 47, Name: "SCTPPin", Stage: StageServiceLB, Miss: MissDrop}   // resubmit only
	EgressPolicy    = Table{ID: 50, Name: "EgressPolicy", Stage: StageEgressPolicy, Miss: MissNext}
	L3Forwarding    = Table{ID: 60, Name: "L3Forwarding", Stage: StageRouting, Miss: MissDrop}
	L3DecTTL        = Table{ID: 61, Name: "L3DecTTL", Stage: StageRouting, Miss: MissDrop}
	IngressPolicy   = Table{ID: 70, Name: "IngressPolicy", Stage: StageIngressPolicy, Miss: MissNext}
	ConntrackCommit = Table{ID: 80, Name: "ConntrackCommit", Stage: StageOutput, Miss: MissNext}
	Output          = Table{ID: 90, Name: "Output", Stage: StageOutput, Miss: MissDrop}
)

// Tables returns the pipeline's tables in order.
func Tables() []Table {
	return []Table{
		Classifier, SpoofGuard, ARPResponder, NDResponder, NDReply, ConntrackZone,
		ConntrackState, SCTPReply, ServiceLB, ServiceAffinity, EndpointDNAT, ServiceHairpin, HairpinUnSNAT, SCTPUnNAT, SCTPPin, EgressPolicy, L3Forwarding, L3DecTTL, IngressPolicy,
		ConntrackCommit, Output,
	}
}

// missTarget is where a MissNext table sends unmatched packets.
func (t Table) missTarget() (Table, bool) {
	if t.Miss == MissJump {
		return TableByID(t.MissTo)
	}
	if t.Miss != MissNext {
		return Table{}, false
	}
	tables := Tables()
	for i, tt := range tables[:len(tables)-1] {
		if tt == t {
			return tables[i+1], true
		}
	}
	return Table{}, false
}

// TableByID finds a pipeline table by number, e.g. to name the tables of a dump.
func TableByID(id uint8) (Table, bool) {
	for _, t := range Tables() {
		if t.ID == id {
			return t, true
		}
	}
	return Table{}, false
}

func (t Table) String() string { return fmt.Sprintf("%d(%s)", t.ID, t.Name) }
