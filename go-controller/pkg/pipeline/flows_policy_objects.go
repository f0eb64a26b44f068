package pipeline

import (
	"cmp"
	"encoding/binary"
	"slices"
	"strconv"
	"strings"

	"github.com/kovs-net/kovs/go-controller/pkg/audit"
)

// The objects of the policy stage (flows_policy.go), each with the Input its flows depend
// on. Keys: "rule/<rule ID>", "clause/<table>/<match>", "allow/<table>/<match>",
// "deny/<ofport>".

// ruleObjects are the conj_id flows, one per rule compiled as a conjunction: a packet
// that meets every clause of the rule continues past the policy table.
func (v *policyView) ruleObjects() []Object {
	objs := make([]Object, len(v.conj))
	for i, r := range v.conj {
		conjID, d := v.conjIDs[r.id], r.dir
		actions := append(v.audit.logs(v.audit.namespace(v.share.Rules[r.id].Policy.Namespace), audit.Allow), Goto(d.next))
		objs[i] = Object{Key: "rule/" + r.id, Input: ruleInput{conjID, d.table.ID, formatActions(actions)}, Compile: func(b *Builder) (ObjectFlows, error) {
			return ObjectFlows{Flows: []Flow{{Table: d.table, Priority: prioPolicyConj,
				Cookie: NewPolicyCookie(b.round, PolicyKindRule, PolicyRuleObjectID(r.id)),
				Match:  MatchAll().ConjID(conjID), Actions: actions}}}, nil
		}}
	}
	return objs
}

// ruleInput is what a rule's conj_id flow depends on.
type ruleInput struct {
	conjID  uint32
	table   uint8
	actions string
}

// clauseInput is what a clause flow depends on besides its match (its key): the
// conjunctions it carries and the rule that names it.
type clauseInput struct {
	conjunctions string // the conjunction actions, encoded
	firstRule    string // lowest rule ID with this clause: names it in the cookie
}

// clauseObjects are the clause flows: one per table and match, carrying the conjunction
// actions of every rule with that clause, in the order of the rules' IDs.
func (v *policyView) clauseObjects() []Object {
	var order []string
	byKey := map[string][]*policyDim{}
	elements := map[string]clauseElement{}
	for _, dim := range v.dimOrder {
		if len(dim.users) == 0 {
			continue // only ever an allow-all rule's pods
		}
		for _, el := range dim.elements {
			if _, ok := byKey[el.key]; !ok {
				order = append(order, el.key)
				elements[el.key] = el
			}
			byKey[el.key] = append(byKey[el.key], dim)
		}
	}
	merged := map[string]mergedConjunctions{} // by the dims a clause is in, when more than one
	objs := make([]Object, 0, len(order))
	for _, key := range order {
		users, encoded := v.clauseUsers(byKey[key], merged)
		el, d := elements[key], byKey[key][0].dir
		first := v.ruleIDs[users[0].rule]
		objs = append(objs, Object{Key: "clause/" + key, Input: clauseInput{conjunctions: encoded, firstRule: first},
			Compile: func(b *Builder) (ObjectFlows, error) {
				actions := make([]Action, len(users))
				for i, u := range users {
					actions[i] = u.conj
				}
				return ObjectFlows{Flows: []Flow{{Table: d.table, Priority: prioPolicyConj,
					Cookie: NewPolicyCookie(b.round, PolicyKindClause, PolicyRuleObjectID(first)), Match: el.match, Actions: actions}}}, nil
			}})
	}
	return objs
}

// mergedConjunctions are the conjunctions of the clauses that are in several dims.
type mergedConjunctions struct {
	users   []conjUse
	encoded string
}

// clauseUsers are the conjunctions of a clause that is in dims, in rule order, and their
// encoding; clauses in the same dims share them.
func (v *policyView) clauseUsers(dims []*policyDim, merged map[string]mergedConjunctions) ([]conjUse, string) {
	if len(dims) == 1 {
		d := dims[0]
		if d.encoded == "" {
			d.encoded = encodeConjunctions(d.users)
		}
		return d.users, d.encoded
	}
	var combo strings.Builder
	for _, d := range dims {
		combo.WriteString(strconv.Itoa(d.index) + ",")
	}
	if m, ok := merged[combo.String()]; ok {
		return m.users, m.encoded
	}
	var users []conjUse
	for _, d := range dims {
		users = append(users, d.users...)
	}
	// Stable: a rule's clauses keep the order of its dims.
	slices.SortStableFunc(users, func(a, b conjUse) int { return cmp.Compare(a.rule, b.rule) })
	m := mergedConjunctions{users: users, encoded: encodeConjunctions(users)}
	merged[combo.String()] = m
	return m.users, m.encoded
}

// encodeConjunctions writes conjunctions as a clause's Input compares them.
func encodeConjunctions(users []conjUse) string {
	b := make([]byte, 0, 6*len(users))
	for _, u := range users {
		b = binary.BigEndian.AppendUint32(b, u.conj.ID)
		b = append(b, u.conj.Clause, u.conj.NClauses)
	}
	return string(b)
}

// allowObjects are the flows of the rules that allow their pods everything (neither peers
// nor ports): one per table and pod, above the conjunctions, named after the lowest rule
// that has it.
func (v *policyView) allowObjects() []Object {
	var order []string
	first := map[string]int{}
	elements := map[string]clauseElement{}
	dirs := map[string]policyDirection{}
	for _, dim := range v.dimOrder {
		if dim.allowFirst < 0 {
			continue
		}
		for _, el := range dim.elements {
			if f, ok := first[el.key]; !ok {
				order = append(order, el.key)
				elements[el.key], dirs[el.key], first[el.key] = el, dim.dir, dim.allowFirst
			} else if dim.allowFirst < f {
				first[el.key] = dim.allowFirst
			}
		}
	}
	objs := make([]Object, len(order))
	for i, key := range order {
		el, d, rule := elements[key], dirs[key], v.ruleIDs[first[key]]
		actions := append(v.audit.logs(v.audit.namespace(v.share.Rules[rule].Policy.Namespace), audit.Allow), Goto(d.next))
		objs[i] = Object{Key: "allow/" + key, Input: [2]string{rule, formatActions(actions)}, Compile: func(b *Builder) (ObjectFlows, error) {
			return ObjectFlows{Flows: []Flow{{Table: d.table, Priority: prioPolicyAllowAll,
				Cookie: NewPolicyCookie(b.round, PolicyKindRule, PolicyRuleObjectID(rule)), Match: el.match,
				Actions: actions}}}, nil
		}}
	}
	return objs
}

// denyInput is what a pod's default deny depends on.
type denyInput struct {
	pending, ingress, egress bool
	// logged: the pod's namespace logs denies (not a pending pod's: no policy decided).
	logged []Action
}

// denyObjects drop, below the rules, the new connections of isolated pods in their
// isolated directions, and of pods the share does not list yet in both: such a pod's
// policy has not arrived, and denying is the safe side.
func (v *policyView) denyObjects(pods []PodPort) []Object {
	var objs []Object
	for _, p := range pods {
		if p.OFPort == 0 {
			continue
		}
		name := p.Namespace + "/" + p.Name
		in := denyInput{pending: v.pending[name], ingress: v.isolated[0][name], egress: v.isolated[1][name]}
		if !in.pending && !in.ingress && !in.egress {
			continue
		}
		if !in.pending {
			in.logged = v.audit.logs(v.audit.namespace(p.Namespace), audit.Deny)
		}
		ofport := p.OFPort
		objs = append(objs, Object{Key: "deny/" + strconv.FormatUint(uint64(ofport), 10), Input: in,
			Compile: func(b *Builder) (ObjectFlows, error) {
				var flows []Flow
				for i, d := range []policyDirection{ingressDirection, egressDirection} {
					kind := d.deny
					if in.pending {
						kind = PolicyKindPending
					} else if !(i == 0 && in.ingress || i == 1 && in.egress) {
						continue
					}
					flows = append(flows, Flow{Table: d.table, Priority: prioPolicyDeny,
						Cookie: NewPolicyCookie(b.round, kind, ofport), Match: d.appliedTo(ofport), Actions: append(slices.Clone(in.logged), Drop{})})
				}
				return ObjectFlows{Flows: flows}, nil
			}})
	}
	return objs
}

// PodIngressDeny is the key of the default-deny flow of an isolated (or pending) pod at
// ofport in IngressPolicy, as the pipeline installs it: tests read its packet counter as
// evidence that a probe was dropped.
func PodIngressDeny(ofport uint32) Flow {
	return Flow{Table: ingressDirection.table, Priority: prioPolicyDeny, Match: ingressDirection.appliedTo(ofport), Actions: []Action{Drop{}}}
}
