package clusterpolicy

import (
	"slices"

	"sigs.k8s.io/network-policy-api/apis/v1beta1"

	"github.com/kovs-net/kovs/go-controller/pkg/policy"
)

// Meet returns rules that allow no connection that old or new denies, given the same
// NetworkPolicy tier: the tiered counterpart of policy.Meet, for the transition gate to
// enforce while a change is on its way to the nodes. Rule by rule (by ID):
//
//   - a Deny, in either, is kept, as the union of both versions (subjects, peers and
//     ports) at the earlier of their two places: a deny added anywhere only restricts;
//   - an Accept present in both at the same place is kept as the intersection of both
//     versions; any other Accept is left out: the connections it accepted go on to the
//     rules after it, and whatever those decide, the share that had the Accept allowed;
//   - a Pass present in both at the same place is kept as the intersection, followed at
//     once by a Deny of the union; any other Pass, and a rule whose action changed
//     between Accept and Pass, becomes that Deny of the union at the earlier place. A
//     Pass may not be left out: what it handed to NetworkPolicy the rules after it might
//     accept.
//
// Why this is enough: let r be the first rule of the meet that matches a connection in
// a direction. A rule of old that matches it and comes before r is neither a Deny nor a
// Pass (the meet has a Deny covering each at a place no later), so it is an Accept, and
// old allows. Otherwise, when r is a kept Accept or Pass, old's version of r is at the
// same place and matches too, so old accepts, or hands the connection to NetworkPolicy
// as the meet does; and when no rule of the meet matches, old's rules accept or let it
// through to NetworkPolicy. The same holds for new. In the Baseline tier Accept and Pass
// both end in the default allow, so the same reading holds there.
//
// What Meet cannot see is the NetworkPolicy tier: the meet of two NetworkPolicy shares
// must, for a pod isolated in one share only, also stay within the other share's
// Baseline rules for that pod (policy.Meet keeps a new NetworkPolicy rule of a pod that
// old did not isolate, which is exact only when old let that pod's traffic through
// whole, that is, when old's Baseline tier has no rule for it).
func Meet(old, nu Rules) Rules {
	olds, news := byID(old), byID(nu)
	var out Rules
	for id, o := range olds {
		n, ok := news[id]
		if !ok {
			out = append(out, oneSided(o)...)
			continue
		}
		out = append(out, both(o, n)...)
	}
	for id, n := range news {
		if _, ok := olds[id]; !ok {
			out = append(out, oneSided(n)...)
		}
	}
	slices.SortStableFunc(out, compareRules)
	return out
}

func byID(rs Rules) map[string]*Rule {
	m := make(map[string]*Rule, len(rs))
	for i := range rs {
		m[rs[i].ID] = &rs[i]
	}
	return m
}

func oneSided(r *Rule) []Rule {
	switch r.Action {
	case v1beta1.ClusterNetworkPolicyRuleActionDeny:
		return []Rule{*r}
	case v1beta1.ClusterNetworkPolicyRuleActionPass:
		d := *r
		d.Action = v1beta1.ClusterNetworkPolicyRuleActionDeny
		return []Rule{d}
	}
	return nil
}

func both(o, n *Rule) []Rule {
	samePlace := o.Tier == n.Tier && o.Priority == n.Priority
	switch {
	case o.Action == n.Action && o.Action == v1beta1.ClusterNetworkPolicyRuleActionAccept:
		if r, ok := intersect(o, n); ok && samePlace {
			return []Rule{r}
		}
		return nil
	case o.Action == n.Action && o.Action == v1beta1.ClusterNetworkPolicyRuleActionPass && samePlace:
		deny := union(o, n)
		deny.ID += "/meet-deny" // sorts right after the Pass: same place, ID extended
		if r, ok := intersect(o, n); ok {
			return []Rule{r, deny}
		}
		return []Rule{deny}
	case o.Action == v1beta1.ClusterNetworkPolicyRuleActionAccept && n.Action == v1beta1.ClusterNetworkPolicyRuleActionAccept:
		return nil
	}
	if o.Action == v1beta1.ClusterNetworkPolicyRuleActionAccept {
		return oneSided(n)
	}
	if n.Action == v1beta1.ClusterNetworkPolicyRuleActionAccept {
		return oneSided(o)
	}
	return []Rule{union(o, n)}
}

// union is a Deny of what either version matches, at the earlier of their places.
func union(o, n *Rule) Rule {
	r := *o
	if compareRules(*n, *o) < 0 {
		r = *n
	}
	r.Action = v1beta1.ClusterNetworkPolicyRuleActionDeny
	r.Subjects = slices.SortedFunc(slices.Values(append(slices.Clone(o.Subjects), n.Subjects...)), policy.PodKey.Compare)
	r.Subjects = slices.Compact(r.Subjects)
	r.AnyPeer = o.AnyPeer || n.AnyPeer
	r.Peers = nil
	if !r.AnyPeer {
		r.Peers = policy.SortPrefixes(append(slices.Clone(o.Peers), n.Peers...))
	}
	r.Ports = nil
	if len(o.Ports) > 0 && len(n.Ports) > 0 {
		r.Ports = append(slices.Clone(o.Ports), n.Ports...)
	}
	return r
}

// intersect is what both versions match, with new's identity; false when nothing.
func intersect(o, n *Rule) (Rule, bool) {
	r := *n
	r.Subjects = nil
	for _, k := range n.Subjects {
		if _, ok := slices.BinarySearchFunc(o.Subjects, k, policy.PodKey.Compare); ok {
			r.Subjects = append(r.Subjects, k)
		}
	}
	switch {
	case o.AnyPeer && n.AnyPeer:
	case o.AnyPeer:
		r.Peers = n.Peers
	case n.AnyPeer:
		r.AnyPeer, r.Peers = false, o.Peers
	default:
		r.Peers = policy.IntersectPrefixes(o.Peers, n.Peers)
	}
	ports, ok := policy.MeetPorts(o.Ports, n.Ports)
	r.Ports = ports
	return r, ok && len(r.Subjects) > 0 && (r.AnyPeer || len(r.Peers) > 0)
}
