package policy

import "slices"

// MeetClusterRules returns cluster rules that allow no connection that old or new denies,
// given the same NetworkPolicy tier: the tiered part of Meet. Rule by rule (by ID):
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
// What it cannot see is the NetworkPolicy tier: for a pod isolated in one share only,
// the meet must also stay within the other share's Baseline rules for that pod, which
// Meet does by leaving out one-sided NetworkPolicy rules of such pods.
//
// old may itself be a meet (the transition gate meets what it sent a node, a meet still
// waiting for its relaxation, with the node's next share): its "/meet-deny" rules are
// Denies of old, kept, and a Pass kept in both makes its "/meet-deny" again; the two
// Denies of one ID become one, of their union (two Denies at one place deny what either
// denies).
func MeetClusterRules(old, nu []ClusterRule) []ClusterRule {
	olds, news := clusterRulesByID(old), clusterRulesByID(nu)
	var out []ClusterRule
	for _, o := range old {
		n, ok := news[o.ID]
		if !ok {
			out = append(out, oneSidedClusterRule(o)...)
			continue
		}
		out = append(out, bothClusterRules(o, n)...)
	}
	for _, n := range nu {
		if _, ok := olds[n.ID]; !ok {
			out = append(out, oneSidedClusterRule(n)...)
		}
	}
	slices.SortStableFunc(out, CompareClusterRules)
	return mergeSameID(out)
}

// mergeSameID makes the rules of one ID one Deny of their union, at the earlier place,
// and returns the rules in precedence order.
func mergeSameID(rules []ClusterRule) []ClusterRule {
	at := make(map[string]int, len(rules))
	var out []ClusterRule
	merged := false
	for _, r := range rules {
		if i, ok := at[r.ID]; ok {
			out[i] = unionClusterRules(out[i], r)
			merged = true
			continue
		}
		at[r.ID] = len(out)
		out = append(out, r)
	}
	if merged {
		slices.SortStableFunc(out, CompareClusterRules)
	}
	return out
}

func clusterRulesByID(rs []ClusterRule) map[string]ClusterRule {
	m := make(map[string]ClusterRule, len(rs))
	for _, r := range rs {
		m[r.ID] = r
	}
	return m
}

func oneSidedClusterRule(r ClusterRule) []ClusterRule {
	switch r.Action {
	case ClusterDeny:
		return []ClusterRule{r}
	case ClusterPass:
		r.Action = ClusterDeny
		return []ClusterRule{r}
	}
	return nil
}

func bothClusterRules(o, n ClusterRule) []ClusterRule {
	samePlace := o.Tier == n.Tier && o.Priority == n.Priority
	switch {
	case o.Action == ClusterAccept && n.Action == ClusterAccept:
		if r, ok := intersectClusterRules(o, n); ok && samePlace {
			return []ClusterRule{r}
		}
		return nil
	case o.Action == ClusterPass && n.Action == ClusterPass && samePlace:
		deny := unionClusterRules(o, n)
		deny.ID += "/meet-deny" // sorts right after the Pass: same place, ID extended
		if r, ok := intersectClusterRules(o, n); ok {
			return []ClusterRule{r, deny}
		}
		return []ClusterRule{deny}
	case o.Action == ClusterAccept:
		return oneSidedClusterRule(n)
	case n.Action == ClusterAccept:
		return oneSidedClusterRule(o)
	}
	return []ClusterRule{unionClusterRules(o, n)}
}

// unionClusterRules is a Deny of what either version matches, at the earlier of their
// places.
func unionClusterRules(o, n ClusterRule) ClusterRule {
	r := o
	if CompareClusterRules(n, o) < 0 {
		r = n
	}
	r.Action = ClusterDeny
	r.Subjects = slices.Compact(slices.SortedFunc(slices.Values(slices.Concat(o.Subjects, n.Subjects)), PodKey.Compare))
	r.AnyPeer = o.AnyPeer || n.AnyPeer
	r.Peers = nil
	if !r.AnyPeer {
		r.Peers = SortPrefixes(slices.Concat(o.Peers, n.Peers))
	}
	r.Ports = nil
	if len(o.Ports) > 0 && len(n.Ports) > 0 {
		r.Ports = slices.Concat(o.Ports, n.Ports)
	}
	return r
}

// intersectClusterRules is what both versions match, with new's identity; false when
// nothing.
func intersectClusterRules(o, n ClusterRule) (ClusterRule, bool) {
	r := n
	r.Subjects = nil
	for _, k := range n.Subjects {
		if _, ok := slices.BinarySearchFunc(o.Subjects, k, PodKey.Compare); ok {
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
		r.Peers = IntersectPrefixes(o.Peers, n.Peers)
	}
	ports, ok := MeetPorts(o.Ports, n.Ports)
	r.Ports = ports
	return r, ok && len(r.Subjects) > 0 && (r.AnyPeer || len(r.Peers) > 0)
}

// hasBaseline reports whether a Baseline rule of the share applies to the pod in
// direction dir.
func (s *NodeShare) hasBaseline(dir Direction, pod PodKey) bool {
	return slices.ContainsFunc(s.ClusterRules, func(r ClusterRule) bool {
		return r.Tier == TierBaseline && r.Direction == dir && r.Applies(pod)
	})
}
