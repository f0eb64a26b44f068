package policy

import (
	"cmp"
	"maps"
	"net/netip"
	"slices"
)

// Direction is the direction of traffic a rule applies to, seen from the pods it applies
// to: Ingress is traffic they receive, Egress traffic they send.
type Direction string

// The directions.
const (
	Ingress Direction = "Ingress"
	Egress  Direction = "Egress"
)

// Protocol is a transport protocol a rule can name.
type Protocol string

// The protocols of networking.k8s.io/v1 NetworkPolicyPort.
const (
	TCP  Protocol = "TCP"
	UDP  Protocol = "UDP"
	SCTP Protocol = "SCTP"
)

// Action is what a rule does with the traffic it matches. NetworkPolicy only allows.
type Action string

// ActionAllow lets matching traffic through an isolated pod's default deny.
const ActionAllow Action = "Allow"

// PolicyRef names the NetworkPolicy a rule comes from.
type PolicyRef struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	UID       string `json:"uid,omitempty"`
}

// PodKey identifies a pod. The UID tells a pod from an earlier one of the same name.
type PodKey struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	UID       string `json:"uid,omitempty"`
}

// Compare orders pod keys by namespace, name, then UID.
func (k PodKey) Compare(o PodKey) int {
	return cmp.Or(cmp.Compare(k.Namespace, o.Namespace), cmp.Compare(k.Name, o.Name), cmp.Compare(k.UID, o.UID))
}

// AppliedPod is a pod a rule applies to: its identity and its addresses, which it may not
// have yet (a pod is isolated from its first packet, before its IPs are known).
type AppliedPod struct {
	PodKey
	IPs []netip.Addr `json:"ips,omitempty"`
}

// Port is a destination port, or range of ports, of one protocol.
type Port struct {
	Protocol Protocol `json:"protocol"`
	// Port is the first (or only) port; 0 means every port of Protocol.
	Port int32 `json:"port,omitempty"`
	// EndPort, when set, ends the inclusive range Port..EndPort.
	EndPort int32 `json:"endPort,omitempty"`
}

// Matches reports whether traffic of protocol proto to port dst matches p.
func (p Port) Matches(proto Protocol, dst int32) bool {
	switch {
	case p.Protocol != proto:
		return false
	case p.Port == 0:
		return true
	case p.EndPort == 0:
		return dst == p.Port
	default:
		return p.Port <= dst && dst <= p.EndPort
	}
}

// AddressSet is a set of peer addresses shared by every rule that selects the same
// peers. Pod addresses are single-address prefixes (/32, /128); ipBlocks are CIDRs with
// their exceptions already subtracted. Addresses are sorted (see ComparePrefixes) and
// unique.
type AddressSet struct {
	// ID is stable: derived from the selectors (or the CIDRs) that define the set, so
	// that it survives controller restarts.
	ID        string         `json:"id"`
	Addresses []netip.Prefix `json:"addresses,omitempty"`
}

// Contains reports whether ip is in the set.
func (s AddressSet) Contains(ip netip.Addr) bool {
	for _, p := range s.Addresses {
		if p.Contains(ip) {
			return true
		}
	}
	return false
}

// AppliedToSet is the set of pods some rules apply to. Its ID is the same on every node;
// its Pods, in a NodeShare, are only those of that node, sorted by PodKey.
type AppliedToSet struct {
	ID   string       `json:"id"`
	Pods []AppliedPod `json:"pods,omitempty"`
}

// Has reports whether the set holds the pod with the given namespace and name.
func (s AppliedToSet) Has(namespace, name string) bool {
	for _, p := range s.Pods {
		if p.Namespace == namespace && p.Name == name {
			return true
		}
	}
	return false
}

// Rule is one allow rule: traffic in Direction between the pods of the AppliedTo set and
// the Peers, to one of the Ports.
type Rule struct {
	// ID is unique and stable: "<namespace>/<policy>/<ingress|egress>/<index>", with a
	// "/<protocol>-<port>" suffix for the rules a named port is split into.
	ID        string    `json:"id"`
	Policy    PolicyRef `json:"policy"`
	RuleIndex int       `json:"ruleIndex"`
	Direction Direction `json:"direction"`
	// AppliedTo is the ID of the AppliedToSet of the pods the rule protects: the
	// destinations of an ingress rule, the sources of an egress rule.
	AppliedTo string `json:"appliedTo"`
	// Peers are the IDs of the AddressSets of the other end; empty means any address.
	// A rule whose peers are all empty sets matches nothing.
	Peers []string `json:"peers,omitempty"`
	// Ports are the destination ports; empty means every port of every protocol.
	Ports  []Port `json:"ports,omitempty"`
	Action Action `json:"action"`
}

// Equal reports whether two rules are the same.
func (r Rule) Equal(o Rule) bool {
	return r.ID == o.ID && r.Policy == o.Policy && r.RuleIndex == o.RuleIndex &&
		r.Direction == o.Direction && r.AppliedTo == o.AppliedTo && r.Action == o.Action &&
		slices.Equal(r.Peers, o.Peers) && slices.Equal(r.Ports, o.Ports)
}

// MatchesPort reports whether the rule's ports admit traffic of proto to port.
func (r Rule) MatchesPort(proto Protocol, port int32) bool {
	if len(r.Ports) == 0 {
		return true
	}
	for _, p := range r.Ports {
		if p.Matches(proto, port) {
			return true
		}
	}
	return false
}

// Isolation lists the pods of a node that are isolated per direction: selected by at
// least one NetworkPolicy whose policyTypes include that direction. Their traffic in that
// direction is denied unless a rule allows it. Both lists are sorted.
type Isolation struct {
	Ingress []PodKey `json:"ingress,omitempty"`
	Egress  []PodKey `json:"egress,omitempty"`
}

// Equal reports whether two isolations list the same pods.
func (i Isolation) Equal(o Isolation) bool {
	return slices.Equal(i.Ingress, o.Ingress) && slices.Equal(i.Egress, o.Egress)
}

// Isolated reports whether the pod is isolated in direction dir.
func (i Isolation) Isolated(dir Direction, namespace, name string) bool {
	list := i.Ingress
	if dir == Egress {
		list = i.Egress
	}
	for _, k := range list {
		if k.Namespace == namespace && k.Name == name {
			return true
		}
	}
	return false
}

// NodeShare is everything one node needs to enforce NetworkPolicy: the rules that apply
// to its pods, the applied-to sets of those rules (restricted to its pods), the address
// sets they reference, and which of its pods are isolated. Maps are keyed by ID.
type NodeShare struct {
	Node string `json:"node"`
	// Generation is the controller's generation this share is current at.
	Generation    uint64                  `json:"generation"`
	AddressSets   map[string]AddressSet   `json:"addressSets,omitempty"`
	AppliedToSets map[string]AppliedToSet `json:"appliedToSets,omitempty"`
	Rules         map[string]Rule         `json:"rules,omitempty"`
	Isolation     Isolation               `json:"isolation"`
	// Pods are the node's pods the controller has evaluated, sorted: every scheduled pod
	// that is neither host-network nor terminated, whether a policy selects it or not. A
	// share that lists a pod (with its UID) holds everything NetworkPolicy says about it,
	// so an agent keeps a new pod closed until its share lists the pod.
	Pods []PodKey `json:"pods,omitempty"`
	// ClusterRules are the ClusterNetworkPolicy rules whose subjects include pods of the
	// node, restricted to them, in precedence order (see ClusterRule and Decide).
	// Receivers that do not know the field enforce NetworkPolicy alone.
	ClusterRules []ClusterRule `json:"clusterRules,omitempty"`
	// MeetPrevious, on a snapshot, says that the sender does not know what the receiver
	// enforces (a controller that just started leading): the receiver enforces the meet
	// of what it enforced before and this share (see Meet), and of every later version of
	// this share, until a Delta with Release. Receivers that do not know the field enforce
	// the share alone, as before it existed.
	MeetPrevious bool `json:"meetPrevious,omitempty"`
}

// NewNodeShare returns an empty share of node at generation 0.
func NewNodeShare(node string) NodeShare {
	return NodeShare{
		Node:          node,
		AddressSets:   map[string]AddressSet{},
		AppliedToSets: map[string]AppliedToSet{},
		Rules:         map[string]Rule{},
	}
}

// HasPod reports whether the controller has evaluated the pod: Pods lists it with its UID
// (with any UID when k.UID is empty).
func (s NodeShare) HasPod(k PodKey) bool {
	i, found := slices.BinarySearchFunc(s.Pods, k, PodKey.Compare)
	if found || k.UID != "" {
		return found
	}
	return i < len(s.Pods) && s.Pods[i].Namespace == k.Namespace && s.Pods[i].Name == k.Name
}

// Clone returns a copy of the share whose maps and pod list can be changed (by
// Delta.Apply) without changing s. The sets and rules inside are shared: nothing in this
// package modifies them in place.
func (s NodeShare) Clone() NodeShare {
	s.AddressSets = maps.Clone(s.AddressSets)
	s.AppliedToSets = maps.Clone(s.AppliedToSets)
	s.Rules = maps.Clone(s.Rules)
	s.Pods = slices.Clone(s.Pods)
	s.ClusterRules = slices.Clone(s.ClusterRules)
	return s
}
