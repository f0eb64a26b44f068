// Package tiermodel is an independent model of ClusterNetworkPolicy
// (policy.networking.k8s.io/v1beta1) over NetworkPolicy: given the namespaces, pods,
// NetworkPolicies and ClusterNetworkPolicies of a cluster, it says whether a connection
// between two pods is allowed, and which tier, in which direction, decided a denial. The
// tier truth tables (test/e2e/clusterpolicy, TestTierTruthTables) check their hand-written
// expectations against it offline and probe the sandbox against them.
//
// It is written from the API's field documentation (sigs.k8s.io/network-policy-api
// apis/v1beta1), not from kovs, and shares no code with kovs-controller; the NetworkPolicy
// tier is the truth tables' own independent model (test/e2e/netpol/policymodel), asked
// one direction at a time. What the documentation says, and what this model does:
//
//   - Each direction is decided on its own: the source's egress, then the destination's
//     ingress; a connection is allowed when both are.
//   - Tier Admin first: its policies in priority order (lower first), each policy's rules
//     in the order written; the first rule whose subject selects the local pod and whose
//     peers and protocols match decides: Accept allows (NetworkPolicy and Baseline are not
//     consulted), Deny denies, Pass skips the rest of the Admin tier.
//   - Then NetworkPolicy: when a NetworkPolicy isolates the pod in that direction, it
//     decides.
//   - Then tier Baseline the same way (Accept and Deny); no match allows.
//   - Two policies of one tier with the same priority whose rules match one connection
//     with different actions are left to the implementation: ErrUnspecified.
//   - Subjects: namespaces (every pod of the selected namespaces) or pods (a namespace
//     selector and a pod selector). Peers: namespaces or pods (ingress and egress), and,
//     in egress, networks (CIDRs) and nodes are not modelled (an error). Protocols: none
//     matches every connection; otherwise one of them must match the protocol and, when
//     given, the destination port number or range.
//   - A pod reaching its own address, and hostNetwork pods, are not modelled (an error):
//     the truth tables do not probe them.
package tiermodel

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/network-policy-api/apis/v1beta1"

	"github.com/kovs-net/kovs/test/e2e/netpol/policymodel"
)

// ErrUnspecified marks a connection whose verdict the API leaves to the implementation.
var ErrUnspecified = errors.New("not specified by the ClusterNetworkPolicy API")

// Cluster is the state the verdicts are computed from.
type Cluster struct {
	Namespaces      []corev1.Namespace
	Pods            []corev1.Pod
	NetworkPolicies []networkingv1.NetworkPolicy
	ClusterPolicies []v1beta1.ClusterNetworkPolicy
}

// Tier names what decided a direction.
type Tier string

const (
	Admin         Tier = "Admin"
	NetworkPolicy Tier = "NetworkPolicy"
	Baseline      Tier = "Baseline"
	Default       Tier = "default" // nothing selected the pod: allowed
)

// Verdict is a connection's verdict: allowed, or denied by Tier in Direction ("egress" of
// the source or "ingress" of the destination).
type Verdict struct {
	Allowed   bool
	Tier      Tier
	Direction string
}

func (v Verdict) String() string {
	if v.Allowed {
		return "allow"
	}
	return fmt.Sprintf("deny (%s %s)", v.Tier, v.Direction)
}

// Decide computes the verdict of conn (policymodel's Connection: pods by namespace/name,
// protocol, port and family).
func (c *Cluster) Decide(conn policymodel.Connection) (Verdict, error) {
	if conn.From == conn.To {
		return Verdict{}, fmt.Errorf("%s: a pod reaching itself is not modelled", conn)
	}
	src, dst := c.pod(conn.From), c.pod(conn.To)
	if src == nil || dst == nil {
		return Verdict{}, fmt.Errorf("%s: no such pod", conn)
	}
	if src.Spec.HostNetwork || dst.Spec.HostNetwork {
		return Verdict{}, fmt.Errorf("%s: hostNetwork pods are not modelled", conn)
	}
	for _, dir := range []string{"egress", "ingress"} {
		local, remote := src, dst
		if dir == "ingress" {
			local, remote = dst, src
		}
		allowed, tier, err := c.direction(dir, local, remote, dst, conn)
		if err != nil {
			return Verdict{}, fmt.Errorf("%s: %s: %w", conn, dir, err)
		}
		if !allowed {
			return Verdict{Tier: tier, Direction: dir}, nil
		}
	}
	return Verdict{Allowed: true}, nil
}

func (c *Cluster) direction(dir string, local, remote, dst *corev1.Pod, conn policymodel.Connection) (bool, Tier, error) {
	action, err := c.tier(v1beta1.AdminTier, dir, local, remote, conn)
	if err != nil {
		return false, "", err
	}
	switch action {
	case v1beta1.ClusterNetworkPolicyRuleActionAccept:
		return true, Admin, nil
	case v1beta1.ClusterNetworkPolicyRuleActionDeny:
		return false, Admin, nil
	}
	isolated, allowed, err := c.networkPolicy(dir, conn)
	if err != nil {
		return false, "", err
	}
	if isolated {
		return allowed, NetworkPolicy, nil
	}
	action, err = c.tier(v1beta1.BaselineTier, dir, local, remote, conn)
	if err != nil {
		return false, "", err
	}
	switch action {
	case v1beta1.ClusterNetworkPolicyRuleActionAccept:
		return true, Baseline, nil
	case v1beta1.ClusterNetworkPolicyRuleActionDeny:
		return false, Baseline, nil
	case v1beta1.ClusterNetworkPolicyRuleActionPass:
		return false, "", fmt.Errorf("a Pass rule in the Baseline tier")
	}
	return true, Default, nil
}

// tier is the action of the first matching rule of the tier ("" when none matches).
func (c *Cluster) tier(tier v1beta1.Tier, dir string, local, remote *corev1.Pod, conn policymodel.Connection) (v1beta1.ClusterNetworkPolicyRuleAction, error) {
	var ps []*v1beta1.ClusterNetworkPolicy
	for i := range c.ClusterPolicies {
		if c.ClusterPolicies[i].Spec.Tier == tier {
			ps = append(ps, &c.ClusterPolicies[i])
		}
	}
	slices.SortStableFunc(ps, func(a, b *v1beta1.ClusterNetworkPolicy) int { return int(a.Spec.Priority - b.Spec.Priority) })
	var decided v1beta1.ClusterNetworkPolicyRuleAction
	var decidedBy *v1beta1.ClusterNetworkPolicy
	for _, p := range ps {
		if decidedBy != nil && p.Spec.Priority != decidedBy.Spec.Priority {
			break
		}
		selected, err := c.subjectSelects(p.Spec.Subject, local)
		if err != nil || !selected {
			if err != nil {
				return "", fmt.Errorf("%s: subject: %w", p.Name, err)
			}
			continue
		}
		action, err := c.firstRule(p, dir, remote, local, conn)
		if err != nil {
			return "", fmt.Errorf("%s: %w", p.Name, err)
		}
		if action == "" {
			continue
		}
		if decidedBy != nil && action != decided {
			return "", fmt.Errorf("%s and %s, both %s priority %d, match with %s and %s: %w",
				decidedBy.Name, p.Name, tier, p.Spec.Priority, decided, action, ErrUnspecified)
		}
		decided, decidedBy = action, p
	}
	return decided, nil
}

func (c *Cluster) firstRule(p *v1beta1.ClusterNetworkPolicy, dir string, remote, local *corev1.Pod, conn policymodel.Connection) (v1beta1.ClusterNetworkPolicyRuleAction, error) {
	if dir == "ingress" {
		for _, r := range p.Spec.Ingress {
			for _, peer := range r.From {
				ok, err := c.peerMatches(peer.Namespaces, peer.Pods, remote)
				if err != nil {
					return "", err
				}
				if ok && protocolsMatch(r.Protocols, conn) {
					return r.Action, nil
				}
			}
		}
		return "", nil
	}
	for _, r := range p.Spec.Egress {
		for _, peer := range r.To {
			if len(peer.Networks) > 0 || peer.Nodes != nil || len(peer.DomainNames) > 0 {
				return "", fmt.Errorf("egress rule %q: networks, nodes and domain names are not modelled", r.Name)
			}
			ok, err := c.peerMatches(peer.Namespaces, peer.Pods, remote)
			if err != nil {
				return "", err
			}
			if ok && protocolsMatch(r.Protocols, conn) {
				return r.Action, nil
			}
		}
	}
	return "", nil
}

func (c *Cluster) subjectSelects(s v1beta1.ClusterNetworkPolicySubject, pod *corev1.Pod) (bool, error) {
	return c.peerMatches(s.Namespaces, s.Pods, pod)
}

// peerMatches: namespaces selects every pod of the namespaces it selects; pods the pods
// its pod selector selects in the namespaces its namespace selector selects.
func (c *Cluster) peerMatches(namespaces *metav1.LabelSelector, pods *v1beta1.NamespacedPod, pod *corev1.Pod) (bool, error) {
	nsLabels := c.namespaceLabels(pod.Namespace)
	switch {
	case namespaces != nil && pods != nil:
		return false, fmt.Errorf("a peer with both namespaces and pods")
	case namespaces != nil:
		return matches(namespaces, nsLabels)
	case pods != nil:
		ok, err := matches(&pods.NamespaceSelector, nsLabels)
		if err != nil || !ok {
			return false, err
		}
		return matches(&pods.PodSelector, pod.Labels)
	}
	return false, fmt.Errorf("a peer with neither namespaces nor pods")
}

// protocolsMatch: no protocols match everything; else one whose protocol is the
// connection's and whose destination port, when given, holds the connection's port.
func protocolsMatch(ps []v1beta1.ClusterNetworkPolicyProtocol, conn policymodel.Connection) bool {
	if len(ps) == 0 {
		return true
	}
	for _, p := range ps {
		var port **v1beta1.Port
		var proto corev1.Protocol
		switch {
		case p.TCP != nil:
			port, proto = &p.TCP.DestinationPort, corev1.ProtocolTCP
		case p.UDP != nil:
			port, proto = &p.UDP.DestinationPort, corev1.ProtocolUDP
		case p.SCTP != nil:
			port, proto = &p.SCTP.DestinationPort, corev1.ProtocolSCTP
		default:
			continue // a named port: not modelled, the cases use none
		}
		if proto != conn.Protocol {
			continue
		}
		dp := *port
		switch {
		case dp == nil:
			return true
		case dp.Range != nil && conn.Port >= dp.Range.Start && conn.Port <= dp.Range.End:
			return true
		case dp.Range == nil && dp.Number == conn.Port:
			return true
		}
	}
	return false
}

// networkPolicy asks policymodel about one direction: whether the NetworkPolicies
// isolate the local pod in it, and whether they allow the connection. A policy's
// directions are its policyTypes, or, left empty, Ingress, and Egress when it has egress
// rules (the networking.k8s.io/v1 documentation); the model is given only the policies
// of dir, as policies of that type alone, so that the other direction is open, and once
// more without their rules: then a connection is denied exactly when the pod is
// isolated.
func (c *Cluster) networkPolicy(dir string, conn policymodel.Connection) (isolated, allowed bool, err error) {
	want := networkingv1.PolicyTypeIngress
	if dir == "egress" {
		want = networkingv1.PolicyTypeEgress
	}
	var only, bare []networkingv1.NetworkPolicy
	for _, np := range c.NetworkPolicies {
		types := np.Spec.PolicyTypes
		if len(types) == 0 {
			types = []networkingv1.PolicyType{networkingv1.PolicyTypeIngress}
			if len(np.Spec.Egress) > 0 {
				types = append(types, networkingv1.PolicyTypeEgress)
			}
		}
		if !slices.Contains(types, want) {
			continue
		}
		p := *np.DeepCopy()
		p.Spec.PolicyTypes = []networkingv1.PolicyType{want}
		if want == networkingv1.PolicyTypeIngress {
			p.Spec.Egress = nil
		} else {
			p.Spec.Ingress = nil
		}
		only = append(only, p)
		b := *p.DeepCopy()
		b.Spec.Ingress, b.Spec.Egress = nil, nil
		bare = append(bare, b)
	}
	m := policymodel.Cluster{Namespaces: c.Namespaces, Pods: c.Pods, Policies: bare}
	open, err := m.Allowed(conn)
	if err != nil {
		return false, false, err
	}
	if open {
		return false, true, nil
	}
	m.Policies = only
	allowed, err = m.Allowed(conn)
	return true, allowed, err
}

func (c *Cluster) pod(key string) *corev1.Pod {
	for i := range c.Pods {
		if c.Pods[i].Namespace+"/"+c.Pods[i].Name == key {
			return &c.Pods[i]
		}
	}
	return nil
}

// namespaceLabels are a namespace's labels with kubernetes.io/metadata.name, which the
// API server sets on every namespace.
func (c *Cluster) namespaceLabels(name string) map[string]string {
	out := map[string]string{"kubernetes.io/metadata.name": name}
	for _, ns := range c.Namespaces {
		if ns.Name == name {
			for k, v := range ns.Labels {
				out[k] = v
			}
		}
	}
	return out
}

// matches evaluates a label selector from its documented meaning: every matchLabels pair
// and every expression must hold; an empty selector selects everything.
func matches(sel *metav1.LabelSelector, labels map[string]string) (bool, error) {
	for k, v := range sel.MatchLabels {
		if got, ok := labels[k]; !ok || got != v {
			return false, nil
		}
	}
	for _, req := range sel.MatchExpressions {
		v, has := labels[req.Key]
		var ok bool
		switch req.Operator {
		case metav1.LabelSelectorOpIn:
			ok = has && slices.Contains(req.Values, v)
		case metav1.LabelSelectorOpNotIn:
			ok = !has || !slices.Contains(req.Values, v)
		case metav1.LabelSelectorOpExists:
			ok = has
		case metav1.LabelSelectorOpDoesNotExist:
			ok = !has
		default:
			return false, fmt.Errorf("operator %q is none of %s", req.Operator, strings.Join([]string{"In", "NotIn", "Exists", "DoesNotExist"}, ", "))
		}
		if !ok {
			return false, nil
		}
	}
	return true, nil
}
