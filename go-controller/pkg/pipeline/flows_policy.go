package pipeline

import (
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	"github.com/kovs-net/kovs/go-controller/pkg/policy"
)

// PolicyFlows compiles the node's NetworkPolicy flows from its share of the policy and
// the ports of its local pods: egress rules in EgressPolicy (on the source pod's node,
// the pod selected by in_port, peers by destination address), ingress rules in
// IngressPolicy (on the destination pod's node, the pod selected by OutPort, peers by
// source address), each rule a conjunction whose clauses are its local applied-to pods,
// its peer addresses and its ports (a clause is left out when the rule allows any peer or
// any port), and a default deny for every isolated pod. A pod whose port is here but that
// the share does not list yet is denied in both directions until it does.
//
// Only new connections meet these flows: established and related packets skip both
// policy stages, and IngressPolicy lets the node's own traffic (from the gateway port)
// through first. The flows are a pure function of the share and the ports: the same input
// gives the same flows (in the same order; SortFlows puts them in reading order), and a
// change of one rule, set or pod changes only the flows that mention it.
func (b *Builder) PolicyFlows(share policy.NodeShare, pods []PodPort) []Flow {
	c := newPolicyCompiler(b, share, pods)
	for _, id := range slices.Sorted(maps.Keys(share.Rules)) {
		c.addRule(share.Rules[id])
	}
	c.addDefaultDeny(pods)
	return c.result()
}

// policyDirection is where and how the rules of one direction are enforced.
type policyDirection struct {
	table Table
	next  Table // where an allowed packet continues
	// appliedTo selects the traffic of a protected pod; peer the traffic of a peer prefix.
	appliedTo func(ofport uint32) Match
	peer      func(p netip.Prefix) Match
	deny      PolicyKind
}

// The two directions, declared once (never written after initialisation).
var (
	egressDirection = policyDirection{
		table: EgressPolicy, next: L3Forwarding, deny: PolicyKindEgressDeny,
		appliedTo: func(ofport uint32) Match { return MatchAll().InPort(ofport) },
		peer:      func(p netip.Prefix) Match { return MatchProtocol(ipProto(p.Addr())).IPDst(p) },
	}
	ingressDirection = policyDirection{
		table: IngressPolicy, next: ConntrackCommit, deny: PolicyKindIngressDeny,
		appliedTo: func(ofport uint32) Match { return MatchAll().Reg(OutPortField.Mark(ofport)) },
		peer:      func(p netip.Prefix) Match { return MatchProtocol(ipProto(p.Addr())).IPSrc(p) },
	}
)

func directionOf(d policy.Direction) policyDirection {
	if d == policy.Egress {
		return egressDirection
	}
	return ingressDirection
}

// policyCompiler collects the flows of one PolicyFlows call. Clause flows with the same
// table and match are one flow carrying the conjunction actions of every rule that has
// that clause; rules with the same applied-to set, peers or ports share the clause lists
// (dims), built once.
type policyCompiler struct {
	b        *Builder
	share    policy.NodeShare
	ports    map[string]PodPort // by namespace/name
	pending  map[string]bool    // by namespace/name: ports of pods the share does not list
	conjIDs  map[string]uint32  // by rule ID
	isolated [2]map[string]bool // ingress, egress: by namespace/name
	clauses  map[string]*policyClause
	dims     map[string][]*policyClause
	allowAll map[string]Flow
	flows    []Flow
}

// policyClause is one clause flow being built.
type policyClause struct {
	table     Table
	match     Match
	key       string // table and match
	firstRule string // lowest rule ID with this clause: names it in the cookie
	conj      []Conjunction
}

func newPolicyCompiler(b *Builder, share policy.NodeShare, pods []PodPort) *policyCompiler {
	c := &policyCompiler{b: b, share: share, ports: make(map[string]PodPort, len(pods)), pending: map[string]bool{},
		conjIDs: conjunctionIDs(share.Rules), clauses: map[string]*policyClause{}, dims: map[string][]*policyClause{},
		allowAll: map[string]Flow{}}
	for _, p := range pods {
		name := p.Namespace + "/" + p.Name
		c.ports[name] = p
		if !share.HasPod(policy.PodKey{Namespace: p.Namespace, Name: p.Name, UID: p.UID}) {
			c.pending[name] = true
		}
	}
	for i, list := range [][]policy.PodKey{share.Isolation.Ingress, share.Isolation.Egress} {
		c.isolated[i] = make(map[string]bool, len(list))
		for _, k := range list {
			c.isolated[i][k.Namespace+"/"+k.Name] = true
		}
	}
	return c
}

// conjunctionIDs gives every rule of the share its conj_id: its PolicyRuleObjectID, or the
// next free number when another rule (of lower ID) has it. IDs are unique in the node and
// never 0 (every packet starts with conj_id 0); they depend only on the set of rule IDs.
func conjunctionIDs(rules map[string]policy.Rule) map[string]uint32 {
	ids := make(map[string]uint32, len(rules))
	used := make(map[uint32]bool, len(rules))
	for _, id := range slices.Sorted(maps.Keys(rules)) {
		n := PolicyRuleObjectID(id)
		for n == 0 || used[n] {
			n++
		}
		used[n] = true
		ids[id] = n
	}
	return ids
}

// addRule adds the flows of one rule: nothing when it protects no local pod or none of
// its peers has an address (of the node's families); a single allow flow per pod when it
// allows any peer on any port; otherwise a conjunction.
func (c *policyCompiler) addRule(r policy.Rule) {
	d := directionOf(r.Direction)
	tableKey := strconv.Itoa(int(d.table.ID))
	dims := [][]*policyClause{c.dim("applied-to/"+tableKey+"/"+r.AppliedTo, d.table, func() []Match { return c.appliedTo(r, d) })}
	if len(r.Peers) > 0 {
		key := "peers/" + tableKey + "/" + strings.Join(r.Peers, ",")
		dims = append(dims, c.dim(key, d.table, func() []Match { return c.peers(r, d) }))
	}
	if len(r.Ports) > 0 {
		key := "ports/" + tableKey + "/" + fmt.Sprint(r.Ports)
		dims = append(dims, c.dim(key, d.table, func() []Match { return c.portMatches(r.Ports) }))
	}
	for _, dim := range dims {
		if len(dim) == 0 {
			return // a clause nothing can satisfy: the rule matches nothing here
		}
	}
	if len(dims) == 1 {
		c.addAllowAll(d, r.ID, dims[0])
		return
	}
	id := c.conjIDs[r.ID]
	for k, dim := range dims {
		conj := Conjunction{ID: id, Clause: uint8(k + 1), NClauses: uint8(len(dims))}
		for _, cl := range dim {
			if len(cl.conj) == 0 {
				cl.firstRule = r.ID
			}
			cl.conj = append(cl.conj, conj)
		}
	}
	c.flows = append(c.flows, Flow{Table: d.table, Priority: prioPolicyConj,
		Cookie: NewPolicyCookie(c.b.round, PolicyKindRule, PolicyRuleObjectID(r.ID)),
		Match:  MatchAll().ConjID(id), Actions: []Action{Goto(d.next)}})
}

// dim returns the clauses of one dimension, computing its matches the first time: every
// rule with the same applied-to set (or peers, or ports) in a table has the same clauses.
func (c *policyCompiler) dim(key string, t Table, matches func() []Match) []*policyClause {
	if dim, ok := c.dims[key]; ok {
		return dim
	}
	var dim []*policyClause
	for _, m := range matches() {
		dim = append(dim, c.clause(t, m))
	}
	c.dims[key] = dim
	return dim
}

// clause is the clause flow of match m in table t.
func (c *policyCompiler) clause(t Table, m Match) *policyClause {
	key := strconv.Itoa(int(t.ID)) + "/" + m.String()
	cl, ok := c.clauses[key]
	if !ok {
		cl = &policyClause{table: t, match: m, key: key}
		c.clauses[key] = cl
	}
	return cl
}

// appliedTo is the rule's clause of local pods: one match per pod of its applied-to set
// that has a port here.
func (c *policyCompiler) appliedTo(r policy.Rule, d policyDirection) []Match {
	var ofports []uint32
	for _, ref := range c.share.AppliedToSets[r.AppliedTo].Pods {
		if p, ok := c.port(ref.PodKey); ok {
			ofports = append(ofports, p.OFPort)
		}
	}
	slices.Sort(ofports)
	ofports = slices.Compact(ofports)
	matches := make([]Match, len(ofports))
	for i, ofport := range ofports {
		matches[i] = d.appliedTo(ofport)
	}
	return matches
}

// port is the local port of pod k, unless the port belongs to another pod of that name or
// to a pending pod (which only its default deny may concern).
func (c *policyCompiler) port(k policy.PodKey) (PodPort, bool) {
	name := k.Namespace + "/" + k.Name
	p, ok := c.ports[name]
	if !ok || p.OFPort == 0 || c.pending[name] || (k.UID != "" && p.UID != "" && k.UID != p.UID) {
		return PodPort{}, false
	}
	return p, true
}

// peers is the rule's clause of peer addresses, of the node's families: addresses of
// another family could never meet this node's pods.
func (c *policyCompiler) peers(r policy.Rule, d policyDirection) []Match {
	var prefixes []netip.Prefix
	for _, id := range r.Peers {
		for _, p := range c.share.AddressSets[id].Addresses {
			if c.b.node.hasFamily(p.Addr().Is6()) {
				prefixes = append(prefixes, p.Masked())
			}
		}
	}
	prefixes = policy.SortPrefixes(prefixes)
	matches := make([]Match, len(prefixes))
	for i, p := range prefixes {
		matches[i] = d.peer(p)
	}
	return matches
}

// portMatches is the rule's clause of destination ports: per port and node family, the
// protocol alone (port 0: every port) or its value/mask matches.
func (c *policyCompiler) portMatches(ports []policy.Port) []Match {
	var matches []Match
	seen := map[string]bool{}
	for _, p := range ports {
		for _, proto := range c.transportProtocols(p.Protocol) {
			for _, m := range portClauses(proto, p) {
				if key := m.String(); !seen[key] {
					seen[key] = true
					matches = append(matches, m)
				}
			}
		}
	}
	return matches
}

// transportProtocols are the shorthands of protocol p for the node's families, e.g. tcp
// and tcp6 on a dual-stack node; none for a protocol NetworkPolicy does not know.
func (c *policyCompiler) transportProtocols(p policy.Protocol) []Protocol {
	var ipProto uint8
	switch p {
	case policy.TCP:
		ipProto = IPProtoTCP
	case policy.UDP:
		ipProto = IPProtoUDP
	case policy.SCTP:
		ipProto = IPProtoSCTP
	default:
		return nil
	}
	var out []Protocol
	for _, v6 := range []bool{false, true} {
		if c.b.node.hasFamily(v6) {
			proto, _ := TransportProtocol(ipProto, v6)
			out = append(out, proto)
		}
	}
	return out
}

// portClauses matches port p of protocol proto: the whole protocol for port 0, the port,
// or the range Port..EndPort as value/mask matches. Ports outside 1..65535 match nothing.
func portClauses(proto Protocol, p policy.Port) []Match {
	switch {
	case p.Port == 0:
		return []Match{MatchProtocol(proto)}
	case p.Port < 1 || p.Port > 65535:
		return nil
	}
	hi := p.Port
	if p.EndPort > p.Port {
		hi = min(p.EndPort, 65535)
	}
	var out []Match
	for _, pm := range PortRangeMasks(uint16(p.Port), uint16(hi)) {
		out = append(out, MatchProtocol(proto).TpDst(pm.Value, pm.Mask))
	}
	return out
}

// addAllowAll adds a rule that allows its pods everything: one flow per pod, above the
// conjunctions. Rules are added in ID order, so a flow shared by several such rules is
// named after the lowest.
func (c *policyCompiler) addAllowAll(d policyDirection, ruleID string, targets []*policyClause) {
	for _, cl := range targets {
		if _, ok := c.allowAll[cl.key]; ok {
			continue
		}
		c.allowAll[cl.key] = Flow{Table: d.table, Priority: prioPolicyAllowAll,
			Cookie: NewPolicyCookie(c.b.round, PolicyKindRule, PolicyRuleObjectID(ruleID)), Match: cl.match,
			Actions: []Action{Goto(d.next)}}
	}
}

// addDefaultDeny drops, below the rules, the new connections of isolated pods in their
// isolated directions, and of pods the share does not list yet in both: such a pod's
// policy has not arrived, and denying is the safe side.
func (c *policyCompiler) addDefaultDeny(pods []PodPort) {
	for _, p := range pods {
		if p.OFPort == 0 {
			continue
		}
		name := p.Namespace + "/" + p.Name
		pending := c.pending[name]
		for i, d := range []policyDirection{ingressDirection, egressDirection} {
			kind := d.deny
			if pending {
				kind = PolicyKindPending
			} else if !c.isolated[i][name] {
				continue
			}
			c.flows = append(c.flows, Flow{Table: d.table, Priority: prioPolicyDeny,
				Cookie: NewPolicyCookie(c.b.round, kind, p.OFPort), Match: d.appliedTo(p.OFPort), Actions: []Action{Drop{}}})
		}
	}
}

// result is every flow compiled: the conj_id and default-deny flows, then the allow-all
// and clause flows by table and match. A clause flow lists its conjunctions in the order
// of their rules' IDs.
func (c *policyCompiler) result() []Flow {
	flows := slices.Clone(c.flows)
	for _, key := range slices.Sorted(maps.Keys(c.allowAll)) {
		flows = append(flows, c.allowAll[key])
	}
	for _, key := range slices.Sorted(maps.Keys(c.clauses)) {
		cl := c.clauses[key]
		if len(cl.conj) == 0 {
			continue // only ever an allow-all rule's target
		}
		actions := make([]Action, len(cl.conj))
		for i, a := range cl.conj {
			actions[i] = a
		}
		flows = append(flows, Flow{Table: cl.table, Priority: prioPolicyConj,
			Cookie: NewPolicyCookie(c.b.round, PolicyKindClause, PolicyRuleObjectID(cl.firstRule)), Match: cl.match,
			Actions: actions})
	}
	return flows
}
