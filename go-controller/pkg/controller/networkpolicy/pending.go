package networkpolicy

import (
	"net/netip"

	"github.com/kovs-net/kovs/go-controller/pkg/policy"
)

// op is what happened to an object of a node's share since the subscriber's last delta.
type op uint8

const (
	opNone op = iota
	opAdd
	opUpdate
	opRemove
	// opReplace (address sets only): removed and added again; sent as both.
	opReplace
	// opPatch (address sets only): addresses changed while the node kept the set.
	opPatch
)

// merge folds the event next into the pending op cur of an object sent whole (a rule or
// an applied-to set). Events are exact transitions of the node's share, so an addition
// never follows an addition.
func merge(cur, next op) op {
	switch {
	case cur == opNone:
		return next
	case cur == opAdd && next == opRemove:
		return opNone // added and gone again: the receiver never knew it
	case cur == opAdd:
		return opAdd // still new: sent whole
	case cur == opRemove && next == opAdd:
		return opUpdate // gone and back: the receiver has the old one
	case next == opRemove:
		return opRemove
	default:
		return opUpdate
	}
}

// addrPending is the pending change of an address set.
type addrPending struct {
	op  op
	set *addrSet // the latest set of this ID
	// added and removed accumulate the patches of opPatch, relative to what the receiver
	// has.
	added, removed map[netip.Prefix]struct{}
}

// event folds an addition or removal of the set into the pending change.
func (a *addrPending) event(next op) {
	switch {
	case a.op == opNone || a.op == opPatch:
		a.op = next
	case a.op == opAdd && next == opRemove:
		a.op = opNone
	case a.op == opRemove && next == opAdd:
		a.op = opReplace
	case a.op == opReplace && next == opRemove:
		a.op = opRemove
	}
	if a.op != opPatch {
		a.added, a.removed = nil, nil
	}
}

// patch folds an address change into the pending change; a set the receiver will get
// whole needs no patch.
func (a *addrPending) patch(added, removed []netip.Prefix) {
	if a.op != opNone && a.op != opPatch {
		return
	}
	a.op = opPatch
	if a.added == nil {
		a.added, a.removed = map[netip.Prefix]struct{}{}, map[netip.Prefix]struct{}{}
	}
	for _, p := range added {
		if _, ok := a.removed[p]; ok {
			delete(a.removed, p) // back to what the receiver has
		} else {
			a.added[p] = struct{}{}
		}
	}
	for _, p := range removed {
		if _, ok := a.added[p]; ok {
			delete(a.added, p)
		} else {
			a.removed[p] = struct{}{}
		}
	}
}

// pending accumulates the changes of a node's share for one subscriber between deltas.
// Entries keep the latest object of each ID, whose content is read when the delta is
// built.
type pending struct {
	rules     map[string]pendingRule
	appliedTo map[string]pendingGroup
	addrs     map[string]*addrPending
	// pods are the node's evaluated pods that joined (opAdd) or left (opRemove).
	pods      map[policy.PodKey]op
	isolation bool
	cluster   bool
}

type pendingRule struct {
	op   op
	rule *rule
}

type pendingGroup struct {
	op    op
	group *group
}

func newPending() pending {
	return pending{rules: map[string]pendingRule{}, appliedTo: map[string]pendingGroup{}, addrs: map[string]*addrPending{},
		pods: map[policy.PodKey]op{}}
}

func (p *pending) empty() bool {
	return len(p.rules) == 0 && len(p.appliedTo) == 0 && len(p.addrs) == 0 && len(p.pods) == 0 && !p.isolation && !p.cluster
}

// pod folds a pod joining or leaving the node into the pending change.
func (p *pending) pod(k policy.PodKey, next op) {
	if o := merge(p.pods[k], next); o == opNone || o == opUpdate {
		delete(p.pods, k) // gone and back with the same UID: nothing changed
	} else {
		p.pods[k] = o
	}
}

func (p *pending) rule(r *rule, next op) {
	if o := merge(p.rules[r.api.ID].op, next); o == opNone {
		delete(p.rules, r.api.ID)
	} else {
		p.rules[r.api.ID] = pendingRule{op: o, rule: r}
	}
}

func (p *pending) group(g *group, next op) {
	if o := merge(p.appliedTo[g.id].op, next); o == opNone {
		delete(p.appliedTo, g.id)
	} else {
		p.appliedTo[g.id] = pendingGroup{op: o, group: g}
	}
}

func (p *pending) addr(a *addrSet) *addrPending {
	ap := p.addrs[a.id]
	if ap == nil {
		ap = &addrPending{}
		p.addrs[a.id] = ap
	}
	ap.set = a
	return ap
}
