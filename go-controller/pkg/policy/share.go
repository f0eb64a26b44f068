package policy

import (
	"fmt"
	"net/netip"
	"slices"
)

// Validate checks that the share is self-contained: every rule's applied-to and peer
// sets are present, every set is sorted and without duplicates, the isolation lists are
// sorted, the pods sorted and unique,
// and the cluster rules in precedence order.
func (s NodeShare) Validate() error {
	for id, r := range s.Rules {
		if r.ID != id {
			return fmt.Errorf("rule %q stored under %q", r.ID, id)
		}
		if _, ok := s.AppliedToSets[r.AppliedTo]; !ok {
			return fmt.Errorf("rule %s: applied-to set %s missing", id, r.AppliedTo)
		}
		for _, p := range r.Peers {
			if _, ok := s.AddressSets[p]; !ok {
				return fmt.Errorf("rule %s: address set %s missing", id, p)
			}
		}
	}
	for id, a := range s.AddressSets {
		if a.ID != id {
			return fmt.Errorf("address set %q stored under %q", a.ID, id)
		}
		if !slices.IsSortedFunc(a.Addresses, ComparePrefixes) || hasAdjacentDuplicates(a.Addresses) {
			return fmt.Errorf("address set %s: addresses not sorted and unique", id)
		}
	}
	for id, a := range s.AppliedToSets {
		if a.ID != id {
			return fmt.Errorf("applied-to set %q stored under %q", a.ID, id)
		}
		if !slices.IsSortedFunc(a.Pods, func(x, y AppliedPod) int { return x.PodKey.Compare(y.PodKey) }) {
			return fmt.Errorf("applied-to set %s: pods not sorted", id)
		}
	}
	if !slices.IsSortedFunc(s.Isolation.Ingress, PodKey.Compare) || !slices.IsSortedFunc(s.Isolation.Egress, PodKey.Compare) {
		return fmt.Errorf("isolation lists not sorted")
	}
	if !isSortedUnique(s.Pods) {
		return fmt.Errorf("pods not sorted and unique")
	}
	return validateClusterRules(s.ClusterRules)
}

func hasAdjacentDuplicates(p []netip.Prefix) bool {
	for i := 1; i < len(p); i++ {
		if p[i] == p[i-1] {
			return true
		}
	}
	return false
}

// AllowsIngress reports whether this share lets the local pod dst receive traffic of
// proto to port from the address src: dst is not isolated for ingress, or an ingress
// rule that applies to dst admits src and the port. It is the reference meaning of the
// share, which the datapath must implement (connection tracking aside: replies of
// allowed connections are always allowed, and so is traffic from the node itself).
func (s NodeShare) AllowsIngress(dst PodKey, src netip.Addr, proto Protocol, port int32) bool {
	return s.allows(Ingress, dst, src, proto, port)
}

// AllowsEgress reports whether this share lets the local pod src send traffic of proto
// to port at the address dst (see AllowsIngress).
func (s NodeShare) AllowsEgress(src PodKey, dst netip.Addr, proto Protocol, port int32) bool {
	return s.allows(Egress, src, dst, proto, port)
}

func (s NodeShare) allows(dir Direction, local PodKey, remote netip.Addr, proto Protocol, port int32) bool {
	if !s.Isolation.Isolated(dir, local.Namespace, local.Name) {
		return true
	}
	for _, r := range s.Rules {
		if r.Direction != dir || !r.MatchesPort(proto, port) {
			continue
		}
		if !s.AppliedToSets[r.AppliedTo].Has(local.Namespace, local.Name) {
			continue
		}
		if len(r.Peers) == 0 {
			return true
		}
		for _, id := range r.Peers {
			if s.AddressSets[id].Contains(remote) {
				return true
			}
		}
	}
	return false
}

// MatchingRules returns the IDs of the rules of this share that admit the traffic, sorted:
// what a trace names as the reason a packet passed.
func (s NodeShare) MatchingRules(dir Direction, local PodKey, remote netip.Addr, proto Protocol, port int32) []string {
	var ids []string
	for id, r := range s.Rules {
		if r.Direction != dir || !r.MatchesPort(proto, port) || !s.AppliedToSets[r.AppliedTo].Has(local.Namespace, local.Name) {
			continue
		}
		match := len(r.Peers) == 0
		for _, p := range r.Peers {
			match = match || s.AddressSets[p].Contains(remote)
		}
		if match {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	return ids
}
