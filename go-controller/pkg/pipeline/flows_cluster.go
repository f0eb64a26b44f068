package pipeline

import (
	"fmt"
	"slices"
	"strconv"

	"github.com/kovs-net/kovs/go-controller/pkg/policy"
)

// The tiers of ClusterNetworkPolicy (docs/cluster-network-policy.md), one table per tier
// and direction around NetworkPolicy's: Admin before it, Baseline after it.
//
//	48 AdminEgressPolicy  -> 50 EgressPolicy  -> 55 BaselineEgressPolicy  -> 60 L3Forwarding
//	65 AdminIngressPolicy -> 70 IngressPolicy -> 75 BaselineIngressPolicy -> 80 ConntrackCommit
//
// What misses an Admin table goes on to NetworkPolicy; NetworkPolicy decides the pods it
// isolates (its allows skip Baseline, its default deny drops), and what it lets through
// unisolated misses into Baseline, whose misses are the default allow.
var (
	AdminEgressPolicy     = Table{ID: 48, Name: "AdminEgressPolicy", Phase: PhaseEgressPolicy, Miss: MissNext}
	BaselineEgressPolicy  = Table{ID: 55, Name: "BaselineEgressPolicy", Phase: PhaseEgressPolicy, Miss: MissNext}
	AdminIngressPolicy    = Table{ID: 65, Name: "AdminIngressPolicy", Phase: PhaseIngressPolicy, Miss: MissNext}
	BaselineIngressPolicy = Table{ID: 75, Name: "BaselineIngressPolicy", Phase: PhaseIngressPolicy, Miss: MissNext}
)

// Priorities of the cluster policy tables. A table's rules, in precedence order, get
// descending priorities from prioClusterRuleTop, one each (a rule's clause flows and its
// conj_id flow share it); the bypasses are above every rule, at 65000 plus the priority of
// the IngressPolicy or EgressPolicy flow they defer to.
const (
	prioClusterRuleTop    = 60000
	maxClusterRules       = 59000 // per table: the lowest rule stays above the miss flow
	prioClusterBypassBase = 65000
)

// ClusterKind is what a cluster policy flow is, in the cookie's bits 39..32.
type ClusterKind uint8

// The kinds of cluster policy flows.
const (
	// ClusterKindRule: a rule's conj_id flow, or its only clause (a rule with neither
	// peers nor ports). The object is PolicyRuleObjectID of the rule ID.
	ClusterKindRule ClusterKind = 1
	// ClusterKindClause: a clause of a rule's conjunction (object: the rule's).
	ClusterKindClause ClusterKind = 2
	// ClusterKindBypass: what the NetworkPolicy table after it lets through before any
	// rule (established connections, the node's own traffic, SCTP replies).
	ClusterKindBypass ClusterKind = 3
)

// NewClusterPolicyCookie is the cookie of a cluster policy flow.
func NewClusterPolicyCookie(r Round, k ClusterKind, obj uint32) Cookie {
	return NewCookie(r, CategoryClusterPolicy, obj) | Cookie(k)<<kindShift
}

// ClusterKind is what a cluster policy flow does; zero for other categories.
func (c Cookie) ClusterKind() ClusterKind {
	if c.Category() != CategoryClusterPolicy {
		return 0
	}
	return ClusterKind(c >> kindShift)
}

// clusterPolicyStage is ClusterNetworkPolicy: the cluster rules of the node's share, one
// conjunction per rule over its local subjects, its peer addresses and its ports (a
// clause left out when the rule has any peer or any port; a rule with neither is one
// flow per subject), each rule at its own priority in its tier's table, so flows grow
// with the sum of subjects, peers and ports of each rule. Its objects are each rule's
// flows (`rule/<table>/<rule ID>`) and the bypasses (`bypass`), while the node has
// cluster rules.
func clusterPolicyStage() Stage {
	return Stage{Name: "cluster policy", Category: CategoryClusterPolicy,
		Tables: []Table{AdminEgressPolicy, BaselineEgressPolicy, AdminIngressPolicy, BaselineIngressPolicy}, Objects: clusterPolicyObjects}
}

// clusterTable is one tier and direction: its table, how it selects its subjects and
// peers (NetworkPolicy's direction), and where each action sends a packet.
type clusterTable struct {
	table            Table
	dir              policyDirection
	accept, passNext Table
}

func clusterTableOf(tier policy.Tier, dir policy.Direction) clusterTable {
	switch {
	case tier == policy.TierAdmin && dir == policy.Egress:
		return clusterTable{table: AdminEgressPolicy, dir: egressDirection, accept: L3Forwarding, passNext: EgressPolicy}
	case tier == policy.TierAdmin:
		return clusterTable{table: AdminIngressPolicy, dir: ingressDirection, accept: ConntrackCommit, passNext: IngressPolicy}
	case dir == policy.Egress:
		return clusterTable{table: BaselineEgressPolicy, dir: egressDirection, accept: L3Forwarding, passNext: L3Forwarding}
	default:
		return clusterTable{table: BaselineIngressPolicy, dir: ingressDirection, accept: ConntrackCommit, passNext: ConntrackCommit}
	}
}

// actions are what a matching packet gets.
func (t clusterTable) actions(a policy.ClusterAction) []Action {
	switch a {
	case policy.ClusterAccept:
		return []Action{Goto(t.accept)}
	case policy.ClusterPass:
		return []Action{Goto(t.passNext)}
	}
	return []Action{Drop{}}
}

// clusterRuleInput is what a rule's flows depend on besides the node.
type clusterRuleInput struct {
	rule     policy.ClusterRule
	priority uint16
	conjID   uint32
	ofports  []uint32
	// logged is the audit log's action before the rule's own (nil: not logged).
	logged []Action
}

func clusterPolicyObjects(s *Snapshot) []Object {
	if s.Policy == nil || len(s.Policy.ClusterRules) == 0 {
		return nil
	}
	share := s.Policy
	v := newPolicyView(s.Node, *share, s.Pods)
	conjIDs := clusterConjunctionIDs(share.ClusterRules)
	objs := []Object{{Key: "bypass", Compile: func(b *Builder) (ObjectFlows, error) { return ObjectFlows{Flows: b.clusterBypassFlows()}, nil }}}
	counts := map[uint8]int{}
	for _, r := range share.ClusterRules {
		t := clusterTableOf(r.Tier, r.Direction)
		n := counts[t.table.ID]
		counts[t.table.ID]++
		var ofports []uint32
		for _, k := range r.Subjects {
			if p, ok := v.port(k); ok {
				ofports = append(ofports, p.OFPort)
			}
		}
		if len(ofports) == 0 {
			continue // no local subject with a port: nothing to match here
		}
		slices.Sort(ofports)
		in := clusterRuleInput{rule: r, priority: uint16(max(prioClusterRuleTop-n, 0)), conjID: conjIDs[r.ID], ofports: slices.Compact(ofports),
			logged: s.Audit.logs(s.Audit.clusterPolicy(r.Policy), ClusterVerdict(r.Action))}
		objs = append(objs, Object{Key: "rule/" + strconv.Itoa(int(t.table.ID)) + "/" + r.ID, Input: in,
			Compile: func(b *Builder) (ObjectFlows, error) {
				if n >= maxClusterRules {
					return ObjectFlows{}, fmt.Errorf("cluster rule %s: more than %d rules in table %s", r.ID, maxClusterRules, t.table)
				}
				return ObjectFlows{Flows: b.clusterRuleFlows(t, in)}, nil
			}})
	}
	return objs
}

// clusterConjunctionIDs gives every cluster rule its conj_id: PolicyRuleObjectID of its
// ID, or the next free number. Unique in the node (and so in each table).
func clusterConjunctionIDs(rules []policy.ClusterRule) map[string]uint32 {
	byID := make(map[string]policy.Rule, len(rules))
	for _, r := range rules {
		byID[r.ID] = policy.Rule{ID: r.ID}
	}
	return conjunctionIDs(byID)
}

// clusterRuleFlows are one rule's flows: its conjunction's clauses and conj_id flow, or,
// without peers and ports, one flow per subject; none when a clause has nothing to match
// (peers without an address of the node's families).
func (b *Builder) clusterRuleFlows(t clusterTable, in clusterRuleInput) []Flow {
	r, d := in.rule, t.dir
	obj := PolicyRuleObjectID(r.ID)
	subjects := make([]Match, len(in.ofports))
	for i, ofport := range in.ofports {
		subjects[i] = d.appliedTo(ofport)
	}
	clauses := [][]Match{subjects}
	if !r.AnyPeer {
		var peers []Match
		for _, p := range r.Peers {
			if b.node.hasFamily(p.Addr().Is6()) {
				peers = append(peers, d.peer(p.Masked()))
			}
		}
		clauses = append(clauses, peers)
	}
	if len(r.Ports) > 0 {
		var ports []Match
		for _, el := range (&policyView{node: b.node}).portMatches(r.Ports, d) {
			ports = append(ports, el.match)
		}
		clauses = append(clauses, ports)
	}
	for _, c := range clauses {
		if len(c) == 0 {
			return nil
		}
	}
	actions := append(slices.Clone(in.logged), t.actions(r.Action)...)
	if len(clauses) == 1 {
		flows := make([]Flow, len(subjects))
		for i, m := range subjects {
			flows[i] = Flow{Table: t.table, Priority: in.priority, Cookie: NewClusterPolicyCookie(b.round, ClusterKindRule, obj), Match: m, Actions: actions}
		}
		return flows
	}
	var flows []Flow
	for k, c := range clauses {
		conj := Conjunction{ID: in.conjID, Clause: uint8(k + 1), NClauses: uint8(len(clauses))}
		seen := map[string]bool{}
		for _, m := range c {
			if key := m.String(); !seen[key] {
				seen[key] = true
				flows = append(flows, Flow{Table: t.table, Priority: in.priority, Cookie: NewClusterPolicyCookie(b.round, ClusterKindClause, obj),
					Match: m, Actions: []Action{conj}})
			}
		}
	}
	return append(flows, Flow{Table: t.table, Priority: in.priority, Cookie: NewClusterPolicyCookie(b.round, ClusterKindRule, obj),
		Match: MatchAll().ConjID(in.conjID), Actions: actions})
}

// clusterBypassFlows send on to the NetworkPolicy table after each Admin table what that
// table lets through before its rules, so that no cluster rule sees it either: in
// AdminIngressPolicy established and related connections (not SCTP), SCTP replies, what
// the node sends its pods from its own addresses and what a pod sends itself through a
// Service (the hairpin address); in AdminEgressPolicy SCTP replies and the hairpin
// address's SCTP (what reaches EgressPolicy is new already). TestClusterBypassMirrorsPolicyBypass
// holds them to IngressPolicy's and EgressPolicy's.
func (b *Builder) clusterBypassFlows() []Flow {
	s := &flowSet{cookie: NewClusterPolicyCookie(b.round, ClusterKindBypass, 0)}
	reply := MatchAll().Reg(SCTPStateReply.Mark())
	s.add(AdminEgressPolicy, prioClusterBypassBase+prioPolicySCTPReply, reply, Goto(EgressPolicy))
	s.add(AdminIngressPolicy, prioClusterBypassBase+prioPolicySCTPReply, reply, Goto(IngressPolicy))
	trusted := MatchAll().Reg(SCTPStateConntrack.Mark())
	s.add(AdminIngressPolicy, prioClusterBypassBase+prioPolicyEstab, trusted.CTState(CTEstablished|CTTracked, CTNew), Goto(IngressPolicy))
	s.add(AdminIngressPolicy, prioClusterBypassBase+prioPolicyRel, trusted.CTState(CTRelated|CTTracked, CTNew), Goto(IngressPolicy))
	for _, ip := range b.nodeAddresses() {
		s.add(AdminIngressPolicy, prioClusterBypassBase+prioPolicyFromGateway,
			MatchProtocol(ipProto(ip)).Reg(PortClassGateway.Mark()).IPSrc(host(ip)), Goto(IngressPolicy))
	}
	for _, proto := range b.families() {
		snat := hairpinAddr(proto)
		s.add(AdminIngressPolicy, prioClusterBypassBase+prioPolicyFromGateway, MatchProtocol(proto).IPSrc(host(snat)), Goto(IngressPolicy))
		sctp, _ := TransportProtocol(IPProtoSCTP, proto == ProtoIPv6)
		// Below the reply bypass: a hairpin SCTP reply matches both.
		s.add(AdminEgressPolicy, prioClusterBypassBase+prioPolicySCTPReply-1, MatchProtocol(sctp).IPSrc(host(snat)), Goto(EgressPolicy))
	}
	return s.flows
}

// ClusterRuleByObject finds the cluster rule of the share whose cookie object is obj
// (PolicyRuleObjectID of its ID): what a trace names as the rule that decided.
func ClusterRuleByObject(share *policy.NodeShare, obj uint32) (policy.ClusterRule, bool) {
	if share == nil {
		return policy.ClusterRule{}, false
	}
	for _, r := range share.ClusterRules {
		if PolicyRuleObjectID(r.ID) == obj {
			return r, true
		}
	}
	return policy.ClusterRule{}, false
}
