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

// policyStage is NetworkPolicy: the node's share of the normalized policy (package
// policy) over its pod ports, enforced in EgressPolicy (on the source pod's node, the pod
// selected by in_port, peers by destination address) and IngressPolicy (on the
// destination pod's node, the pod selected by OutPort, peers by source address). Each rule
// is a conjunction whose clauses are its local applied-to pods, its peer addresses and its
// ports (a clause is left out when the rule allows any peer or any port); a rule with
// neither peers nor ports allows its pods everything; every isolated pod gets a default
// deny, and a pod whose port is here but that the share does not list yet is denied both
// ways until it does.
//
// Only new connections meet these flows: established and related packets skip both
// policy stages, and IngressPolicy lets the node's own traffic (from the gateway port)
// through first.
//
// The objects are the flows that change together: each rule's conj_id flow, each clause
// flow (one table and match, carrying the conjunction actions of every rule that has the
// clause), each allow-all flow, and each pod's default deny. Flows grow with the sum, not
// the product, of pods, peers and ports; a change to one rule, set or pod compiles only
// the flows that mention it.
func policyStage() Stage {
	return Stage{Name: "policy", Category: CategoryPolicy, Tables: []Table{EgressPolicy, IngressPolicy}, Objects: policyObjects}
}

// PolicyFlows compiles the node's NetworkPolicy flows from its share of the policy and
// the ports of its local pods (the policy stage's objects, all of them).
func (b *Builder) PolicyFlows(share policy.NodeShare, pods []PodPort) []Flow {
	var flows []Flow
	for _, o := range policyObjects(&Snapshot{Node: b.node, Pods: pods, Policy: &share}) {
		out, _ := o.Compile(b) // policy objects never fail
		flows = append(flows, out.Flows...)
	}
	return flows
}

// policyDirection is where and how the rules of one direction are enforced.
type policyDirection struct {
	table Table
	next  Table // where an allowed packet continues
	// appliedTo selects the traffic of a protected pod; peer the traffic of a peer prefix.
	appliedTo func(ofport uint32) Match
	peer      func(p netip.Prefix) Match
	// appliedToKey and peerKey name the same matches in a clause's object key.
	appliedToKey, peerKey string
	deny                  PolicyKind
}

// The two directions, declared once (never written after initialisation).
var (
	egressDirection = policyDirection{
		table: EgressPolicy, next: L3Forwarding, deny: PolicyKindEgressDeny, appliedToKey: "in_port=", peerKey: "dst=",
		appliedTo: func(ofport uint32) Match { return MatchAll().InPort(ofport) },
		peer:      func(p netip.Prefix) Match { return MatchProtocol(ipProto(p.Addr())).IPDst(p) },
	}
	ingressDirection = policyDirection{
		table: IngressPolicy, next: ConntrackCommit, deny: PolicyKindIngressDeny, appliedToKey: "reg1=", peerKey: "src=",
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

// policyView is the node's share as its flows see it: which local pods rules select,
// which pods are isolated or pending, every rule's conj_id, and the clause lists (dims)
// of the rules, each computed once however many rules share it.
type policyView struct {
	audit    *Audit // what is logged; nil: nothing
	node     NodeConfig
	share    policy.NodeShare
	ruleIDs  []string           // sorted: a rule's index in it orders its conjunctions
	ports    map[string]PodPort // by namespace/name
	pending  map[string]bool    // by namespace/name: ports of pods the share does not list
	isolated [2]map[string]bool // ingress, egress: by namespace/name
	conjIDs  map[string]uint32  // by rule ID
	dims     map[string]*policyDim
	dimOrder []*policyDim
	conj     []conjRule
}

// policyDim is one clause list: a rule's applied-to pods, peers or ports in one table.
// Every rule with the same list has the same clauses.
type policyDim struct {
	dir      policyDirection
	elements []clauseElement
	// users are the conjunctions that have this list as a clause, in rule order;
	// allowFirst is the first rule (index) that allows its pods everything, -1 if none.
	users      []conjUse
	allowFirst int
	encoded    string // users, as a clause's Input
	index      int    // in dimOrder
}

// clauseElement is one match of a clause list, with the key that names its flow.
type clauseElement struct {
	key   string
	match Match
}

type conjUse struct {
	rule int // index in ruleIDs
	conj Conjunction
}

type conjRule struct {
	id  string
	dir policyDirection
}

func newPolicyView(node NodeConfig, share policy.NodeShare, pods []PodPort) *policyView {
	v := &policyView{node: node, share: share, ruleIDs: slices.Sorted(maps.Keys(share.Rules)),
		ports: make(map[string]PodPort, len(pods)), pending: map[string]bool{}, dims: map[string]*policyDim{}}
	v.conjIDs = conjunctionIDs(share.Rules)
	for _, p := range pods {
		name := p.Namespace + "/" + p.Name
		v.ports[name] = p
		if !share.HasPod(policy.PodKey{Namespace: p.Namespace, Name: p.Name, UID: p.UID}) {
			v.pending[name] = true
		}
	}
	for i, list := range [][]policy.PodKey{share.Isolation.Ingress, share.Isolation.Egress} {
		v.isolated[i] = make(map[string]bool, len(list))
		for _, k := range list {
			v.isolated[i][k.Namespace+"/"+k.Name] = true
		}
	}
	return v
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

func policyObjects(s *Snapshot) []Object {
	if s.Policy == nil {
		return nil
	}
	v := newPolicyView(s.Node, *s.Policy, s.Pods)
	v.audit = s.Audit
	for i, id := range v.ruleIDs {
		v.addRule(i, v.share.Rules[id])
	}
	objs := v.ruleObjects()
	objs = append(objs, v.clauseObjects()...)
	objs = append(objs, v.allowObjects()...)
	return append(objs, v.denyObjects(s.Pods)...)
}

// addRule notes rule r (index i): nothing when it protects no local pod or none of its
// peers has an address (of the node's families); an allow-all when it allows any peer on
// any port; otherwise a conjunction over its clause lists.
func (v *policyView) addRule(i int, r policy.Rule) {
	d := directionOf(r.Direction)
	table := strconv.Itoa(int(d.table.ID))
	dims := []*policyDim{v.dim("applied-to/"+table+"/"+r.AppliedTo, d, func() []clauseElement { return v.appliedTo(r, d) })}
	if len(r.Peers) > 0 {
		key := "peers/" + table + "/" + strings.Join(r.Peers, ",")
		dims = append(dims, v.dim(key, d, func() []clauseElement { return v.peers(r, d) }))
	}
	if len(r.Ports) > 0 {
		key := "ports/" + table + "/" + fmt.Sprint(r.Ports)
		dims = append(dims, v.dim(key, d, func() []clauseElement { return v.portMatches(r.Ports, d) }))
	}
	for _, dim := range dims {
		if len(dim.elements) == 0 {
			return // a clause nothing can satisfy: the rule matches nothing here
		}
	}
	if len(dims) == 1 {
		if dims[0].allowFirst < 0 {
			dims[0].allowFirst = i
		}
		return
	}
	id := v.conjIDs[r.ID]
	for k, dim := range dims {
		dim.users = append(dim.users, conjUse{rule: i, conj: Conjunction{ID: id, Clause: uint8(k + 1), NClauses: uint8(len(dims))}})
	}
	v.conj = append(v.conj, conjRule{id: r.ID, dir: d})
}

// dim returns the clause list of key, computing its elements the first time.
func (v *policyView) dim(key string, d policyDirection, elements func() []clauseElement) *policyDim {
	if dim, ok := v.dims[key]; ok {
		return dim
	}
	dim := &policyDim{dir: d, elements: elements(), allowFirst: -1, index: len(v.dimOrder)}
	v.dims[key] = dim
	v.dimOrder = append(v.dimOrder, dim)
	return dim
}

// appliedTo is the rule's clause of local pods: one match per pod of its applied-to set
// that has a port here.
func (v *policyView) appliedTo(r policy.Rule, d policyDirection) []clauseElement {
	var ofports []uint32
	for _, ref := range v.share.AppliedToSets[r.AppliedTo].Pods {
		if p, ok := v.port(ref.PodKey); ok {
			ofports = append(ofports, p.OFPort)
		}
	}
	slices.Sort(ofports)
	ofports = slices.Compact(ofports)
	out := make([]clauseElement, len(ofports))
	for i, ofport := range ofports {
		out[i] = clauseElement{key: d.table.Name + "/" + d.appliedToKey + strconv.FormatUint(uint64(ofport), 10), match: d.appliedTo(ofport)}
	}
	return out
}

// port is the local port of pod k, unless the port belongs to another pod of that name or
// to a pending pod (which only its default deny may concern).
func (v *policyView) port(k policy.PodKey) (PodPort, bool) {
	name := k.Namespace + "/" + k.Name
	p, ok := v.ports[name]
	if !ok || p.OFPort == 0 || v.pending[name] || (k.UID != "" && p.UID != "" && k.UID != p.UID) {
		return PodPort{}, false
	}
	return p, true
}

// peers is the rule's clause of peer addresses, of the node's families: addresses of
// another family could never meet this node's pods.
func (v *policyView) peers(r policy.Rule, d policyDirection) []clauseElement {
	var prefixes []netip.Prefix
	for _, id := range r.Peers {
		for _, p := range v.share.AddressSets[id].Addresses {
			if v.node.hasFamily(p.Addr().Is6()) {
				prefixes = append(prefixes, p.Masked())
			}
		}
	}
	prefixes = policy.SortPrefixes(prefixes)
	out := make([]clauseElement, len(prefixes))
	for i, p := range prefixes {
		out[i] = clauseElement{key: d.table.Name + "/" + d.peerKey + p.String(), match: d.peer(p)}
	}
	return out
}

// portMatches is the rule's clause of destination ports: per port and node family, the
// protocol alone (port 0: every port) or its value/mask matches.
func (v *policyView) portMatches(ports []policy.Port, d policyDirection) []clauseElement {
	var out []clauseElement
	seen := map[string]bool{}
	for _, p := range ports {
		for _, proto := range v.transportProtocols(p.Protocol) {
			for _, pc := range portClauses(proto, p) {
				key := d.table.Name + "/" + pc.key
				if !seen[key] {
					seen[key] = true
					out = append(out, clauseElement{key: key, match: pc.match})
				}
			}
		}
	}
	return out
}

// transportProtocols are the shorthands of protocol p for the node's families, e.g. tcp
// and tcp6 on a dual-stack node; none for a protocol NetworkPolicy does not know.
func (v *policyView) transportProtocols(p policy.Protocol) []Protocol {
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
		if v.node.hasFamily(v6) {
			proto, _ := TransportProtocol(ipProto, v6)
			out = append(out, proto)
		}
	}
	return out
}

// portClause is one match of a port clause, with the key that names it.
type portClause struct {
	key   string
	match Match
}

// portClauses matches port p of protocol proto: the whole protocol for port 0, the port,
// or the range Port..EndPort as value/mask matches. Ports outside 1..65535 match nothing.
func portClauses(proto Protocol, p policy.Port) []portClause {
	switch {
	case p.Port == 0:
		return []portClause{{key: proto.String(), match: MatchProtocol(proto)}}
	case p.Port < 1 || p.Port > 65535:
		return nil
	}
	hi := p.Port
	if p.EndPort > p.Port {
		hi = min(p.EndPort, 65535)
	}
	var out []portClause
	for _, pm := range PortRangeMasks(uint16(p.Port), uint16(hi)) {
		key := proto.String() + ":" + strconv.Itoa(int(pm.Value)) + "/" + strconv.Itoa(int(pm.Mask))
		out = append(out, portClause{key: key, match: MatchProtocol(proto).TpDst(pm.Value, pm.Mask)})
	}
	return out
}
