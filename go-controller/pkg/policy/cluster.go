package policy

import (
	"cmp"
	"fmt"
	"net/netip"
	"slices"
)

// Tier is the tier of a ClusterNetworkPolicy (policy.networking.k8s.io/v1beta1): Admin
// is decided before NetworkPolicy, Baseline after it.
type Tier string

// The tiers.
const (
	TierAdmin    Tier = "Admin"
	TierBaseline Tier = "Baseline"
)

// ClusterAction is what a ClusterNetworkPolicy rule does with the traffic it matches.
type ClusterAction string

// The actions: Accept and Deny are final for the direction; Pass skips the rest of the
// tier (Admin: on to NetworkPolicy; Baseline: on to the default allow).
const (
	ClusterAccept ClusterAction = "Accept"
	ClusterDeny   ClusterAction = "Deny"
	ClusterPass   ClusterAction = "Pass"
)

// ClusterRule is one rule of a ClusterNetworkPolicy, resolved, as a node's share carries
// it: in Direction, traffic between the node's pods among Subjects and the Peers (every
// address when AnyPeer), to one of the Ports (all traffic when empty), gets Action. A
// share holds its ClusterRules in precedence order (CompareClusterRules).
//
// Peers are carried inline, not as address sets: a node's cluster rules travel as one
// list that a Delta replaces whole, which keeps the tiered meet of the transition gate
// exact (MeetClusterRules), at the price of resending the list when a peer pod comes or
// goes (docs/cluster-network-policy.md).
type ClusterRule struct {
	// ID is "<policy>/<ingress|egress>/<index>", with "/<protocol>-<number>" for the
	// rules a destination named port is split into, and "/meet-deny" for the Deny a
	// meet adds after a Pass.
	ID     string `json:"id"`
	Policy string `json:"policy"`
	// Name is the rule's name in the policy, if it has one; Index its position in its
	// direction's list.
	Name      string        `json:"name,omitempty"`
	Index     int           `json:"index"`
	Tier      Tier          `json:"tier"`
	Priority  int32         `json:"priority"`
	Direction Direction     `json:"direction"`
	Action    ClusterAction `json:"action"`
	// Subjects are the pods the rule applies to, sorted (in a node's share, that node's).
	Subjects []PodKey `json:"subjects,omitempty"`
	// AnyPeer: the rule matches every address.
	AnyPeer bool `json:"anyPeer,omitempty"`
	// Peers are the addresses of the other end, sorted and unique.
	Peers []netip.Prefix `json:"peers,omitempty"`
	Ports []Port         `json:"ports,omitempty"`
}

// CompareClusterRules orders rules by precedence: Admin before Baseline, then by
// priority, policy name (the order kovs gives equal priorities), direction, index and ID.
func CompareClusterRules(a, b ClusterRule) int {
	return cmp.Or(cmp.Compare(tierRank(a.Tier), tierRank(b.Tier)), cmp.Compare(a.Priority, b.Priority),
		cmp.Compare(a.Policy, b.Policy), cmp.Compare(a.Direction, b.Direction), cmp.Compare(a.Index, b.Index),
		cmp.Compare(a.ID, b.ID))
}

func tierRank(t Tier) int {
	if t == TierAdmin {
		return 0
	}
	return 1
}

// Equal reports whether two rules are the same.
func (r ClusterRule) Equal(o ClusterRule) bool {
	return r.ID == o.ID && r.Policy == o.Policy && r.Name == o.Name && r.Index == o.Index && r.Tier == o.Tier &&
		r.Priority == o.Priority && r.Direction == o.Direction && r.Action == o.Action && r.AnyPeer == o.AnyPeer &&
		slices.Equal(r.Subjects, o.Subjects) && slices.Equal(r.Peers, o.Peers) && slices.Equal(r.Ports, o.Ports)
}

// Applies reports whether the rule applies to the pod (namespace and name).
func (r ClusterRule) Applies(pod PodKey) bool {
	return slices.ContainsFunc(r.Subjects, func(k PodKey) bool { return k.Namespace == pod.Namespace && k.Name == pod.Name })
}

// Matches reports whether the rule matches traffic of its direction between one of its
// subjects and the remote address, of proto to port (proto "" is traffic without ports,
// such as ICMP: only a rule without ports matches it).
func (r ClusterRule) Matches(remote netip.Addr, proto Protocol, port int32) bool {
	if len(r.Ports) > 0 && !slices.ContainsFunc(r.Ports, func(p Port) bool { return p.Matches(proto, port) }) {
		return false
	}
	return r.AnyPeer || slices.ContainsFunc(r.Peers, func(p netip.Prefix) bool { return p.Contains(remote) })
}

// EqualClusterRules reports whether two lists hold the same rules in the same order.
func EqualClusterRules(a, b []ClusterRule) bool { return slices.EqualFunc(a, b, ClusterRule.Equal) }

// validateClusterRules checks that rules are in precedence order with unique IDs, known
// tiers, actions and directions, and sorted subjects and peers.
func validateClusterRules(rules []ClusterRule) error {
	if !slices.IsSortedFunc(rules, CompareClusterRules) {
		return fmt.Errorf("cluster rules not in precedence order")
	}
	seen := make(map[string]bool, len(rules))
	for _, r := range rules {
		switch {
		case seen[r.ID]:
			return fmt.Errorf("cluster rule %s: listed twice", r.ID)
		case r.Tier != TierAdmin && r.Tier != TierBaseline:
			return fmt.Errorf("cluster rule %s: unknown tier %q", r.ID, r.Tier)
		case r.Action != ClusterAccept && r.Action != ClusterDeny && r.Action != ClusterPass:
			return fmt.Errorf("cluster rule %s: unknown action %q", r.ID, r.Action)
		case r.Direction != Ingress && r.Direction != Egress:
			return fmt.Errorf("cluster rule %s: unknown direction %q", r.ID, r.Direction)
		case !slices.IsSortedFunc(r.Subjects, PodKey.Compare):
			return fmt.Errorf("cluster rule %s: subjects not sorted", r.ID)
		case !slices.IsSortedFunc(r.Peers, ComparePrefixes) || hasAdjacentDuplicates(r.Peers):
			return fmt.Errorf("cluster rule %s: peers not sorted and unique", r.ID)
		}
		seen[r.ID] = true
	}
	return nil
}

// ClusterDecision is what the tiers decided for one direction of a connection: whether
// it is allowed, the tier that decided ("Admin", "NetworkPolicy", "Baseline" or
// "Default") and the cluster rule, when one did.
type ClusterDecision struct {
	Allowed bool
	Tier    string
	Rule    string
}

// The deciders besides the tiers.
const (
	DecidedByNetworkPolicy = "NetworkPolicy"
	DecidedByDefault       = "Default"
)

// Decide is the reference verdict of the share for one direction of a connection of a
// local pod: the Admin tier, then NetworkPolicy (a pod it isolates in that direction is
// decided there), then the Baseline tier, then the default allow. The datapath must
// implement it (connection tracking aside, and traffic from the node itself).
func (s NodeShare) Decide(dir Direction, local PodKey, remote netip.Addr, proto Protocol, port int32) ClusterDecision {
	passed := map[Tier]bool{}
	for _, r := range s.ClusterRules {
		if r.Direction != dir || passed[r.Tier] || !r.Applies(local) || !r.Matches(remote, proto, port) {
			continue
		}
		if r.Action == ClusterPass {
			passed[r.Tier] = true
			continue
		}
		if r.Tier == TierBaseline && s.Isolation.Isolated(dir, local.Namespace, local.Name) {
			break // NetworkPolicy decides before any Baseline rule
		}
		return ClusterDecision{Allowed: r.Action == ClusterAccept, Tier: string(r.Tier), Rule: r.ID}
	}
	if s.Isolation.Isolated(dir, local.Namespace, local.Name) {
		return ClusterDecision{Allowed: s.allows(dir, local, remote, proto, port), Tier: DecidedByNetworkPolicy}
	}
	return ClusterDecision{Allowed: true, Tier: DecidedByDefault}
}

// ClusterBatch is one batch of the ClusterNetworkPolicy feed as the NetworkPolicy
// compiler takes it: where the feed evaluated the pods it evaluated anew, the pods it no
// longer evaluates, and, when HasRules, every node's cluster rules.
type ClusterBatch struct {
	// Rules, when HasRules, replaces every node's cluster rules (by node name, in
	// precedence order; a node not listed has none). Without HasRules they are the same
	// as the batch before.
	Rules    map[string][]ClusterRule
	HasRules bool
	// Evaluated is the node where the batch evaluated each pod that is new to the feed or
	// moved since the batch before ("" for a pod not scheduled); a pod not named keeps
	// where the batches before evaluated it.
	Evaluated map[PodKey]string
	// Forgotten are the pods the feed no longer evaluates: deleted, or no longer
	// selectable (host-network, terminated).
	Forgotten map[PodKey]bool
}

// Add makes b say what b and next, the batch after it, say together (b's maps change,
// next's do not).
func (b *ClusterBatch) Add(next ClusterBatch) {
	if next.HasRules {
		b.Rules, b.HasRules = next.Rules, true
	}
	if b.Evaluated == nil {
		b.Evaluated = map[PodKey]string{}
	}
	if b.Forgotten == nil {
		b.Forgotten = map[PodKey]bool{}
	}
	for k := range next.Forgotten {
		delete(b.Evaluated, k)
		b.Forgotten[k] = true
	}
	for k, node := range next.Evaluated {
		b.Evaluated[k] = node
		delete(b.Forgotten, k)
	}
}
