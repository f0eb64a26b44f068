package clusterpolicy

import (
	"net/netip"

	"sigs.k8s.io/network-policy-api/apis/v1beta1"

	"github.com/kovs-net/kovs/go-controller/pkg/policy"
)

// Connection is the first packet of a connection: its source and destination address,
// the pods they are (nil: not a pod), its protocol ("" for one without ports, such as
// ICMP) and destination port.
type Connection struct {
	Src, Dst     *policy.PodKey
	SrcIP, DstIP netip.Addr
	Protocol     policy.Protocol
	Port         int32
}

// NetworkPolicyTier is the NetworkPolicy tier between Admin and Baseline: whether it
// isolates a pod in a direction, and if so whether it allows a remote address and port.
type NetworkPolicyTier interface {
	Isolated(dir policy.Direction, pod policy.PodKey) bool
	Allows(dir policy.Direction, pod policy.PodKey, remote netip.Addr, proto policy.Protocol, port int32) bool
}

// Tier names what decided a direction of a connection.
type Tier string

// What can decide: a tier, or nothing (the default allow).
const (
	DecidedByAdmin         Tier = "Admin"
	DecidedByNetworkPolicy Tier = "NetworkPolicy"
	DecidedByBaseline      Tier = "Baseline"
	DecidedByDefault       Tier = "Default"
)

// Decision is the verdict of one direction and what made it: the tier and, for the
// ClusterNetworkPolicy tiers, the rule.
type Decision struct {
	Allowed bool
	Tier    Tier
	Rule    *Rule
}

// Verdict is a connection's fate: allowed when both directions allow it.
type Verdict struct {
	Egress, Ingress Decision
}

// Allowed reports whether the connection passes.
func (v Verdict) Allowed() bool { return v.Egress.Allowed && v.Ingress.Allowed }

// Allows decides a connection: the egress of its source pod and the ingress of its
// destination pod (a direction whose end is no pod is allowed by the default).
func (rs Rules) Allows(np NetworkPolicyTier, c Connection) Verdict {
	v := Verdict{Egress: Decision{Allowed: true, Tier: DecidedByDefault}, Ingress: Decision{Allowed: true, Tier: DecidedByDefault}}
	if c.Src != nil {
		v.Egress = rs.decide(np, policy.Egress, *c.Src, c.DstIP, c.Protocol, c.Port)
	}
	if c.Dst != nil {
		v.Ingress = rs.decide(np, policy.Ingress, *c.Dst, c.SrcIP, c.Protocol, c.Port)
	}
	return v
}

func (rs Rules) decide(np NetworkPolicyTier, dir policy.Direction, pod policy.PodKey, remote netip.Addr,
	proto policy.Protocol, port int32) Decision {
	if r := rs.First(v1beta1.AdminTier, dir, pod, remote, proto, port); r != nil && r.Action != v1beta1.ClusterNetworkPolicyRuleActionPass {
		return Decision{Allowed: r.Action == v1beta1.ClusterNetworkPolicyRuleActionAccept, Tier: DecidedByAdmin, Rule: r}
	}
	if np != nil && np.Isolated(dir, pod) {
		return Decision{Allowed: np.Allows(dir, pod, remote, proto, port), Tier: DecidedByNetworkPolicy}
	}
	if r := rs.First(v1beta1.BaselineTier, dir, pod, remote, proto, port); r != nil && r.Action != v1beta1.ClusterNetworkPolicyRuleActionPass {
		return Decision{Allowed: r.Action == v1beta1.ClusterNetworkPolicyRuleActionAccept, Tier: DecidedByBaseline, Rule: r}
	}
	return Decision{Allowed: true, Tier: DecidedByDefault}
}

// First returns the rule of the tier that comes first among those matching traffic in
// dir of the pod with the remote address, protocol and port; nil if none matches.
func (rs Rules) First(tier v1beta1.Tier, dir policy.Direction, pod policy.PodKey, remote netip.Addr,
	proto policy.Protocol, port int32) *Rule {
	for i := range rs {
		if r := &rs[i]; r.Tier == tier && r.Direction == dir && r.matches(pod, remote, proto, port) {
			return r
		}
	}
	return nil
}

func (r *Rule) matches(pod policy.PodKey, remote netip.Addr, proto policy.Protocol, port int32) bool {
	if !hasPod(r.Subjects, pod) {
		return false
	}
	if !r.AnyPeer && !containsAddr(r.Peers, remote) {
		return false
	}
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

func hasPod(pods []policy.PodKey, k policy.PodKey) bool {
	for _, p := range pods {
		if p.Namespace == k.Namespace && p.Name == k.Name {
			return true
		}
	}
	return false
}

func containsAddr(prefixes []netip.Prefix, ip netip.Addr) bool {
	for _, p := range prefixes {
		if p.Contains(ip) {
			return true
		}
	}
	return false
}
