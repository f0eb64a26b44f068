package policymodel

import (
	"fmt"
	"net/netip"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// matches evaluates a label selector on a label set: every matchLabels pair and every
// matchExpressions requirement must hold; an empty selector selects everything.
func matches(sel *metav1.LabelSelector, labels map[string]string) (bool, error) {
	for k, v := range sel.MatchLabels {
		if got, ok := labels[k]; !ok || got != v {
			return false, nil
		}
	}
	for _, req := range sel.MatchExpressions {
		ok, err := requirementHolds(req, labels)
		if err != nil || !ok {
			return false, err
		}
	}
	return true, nil
}

func requirementHolds(req metav1.LabelSelectorRequirement, labels map[string]string) (bool, error) {
	v, present := labels[req.Key]
	in := false
	for _, x := range req.Values {
		in = in || x == v
	}
	switch req.Operator {
	case metav1.LabelSelectorOpIn, metav1.LabelSelectorOpNotIn:
		if len(req.Values) == 0 {
			return false, fmt.Errorf("%s %s with no values (the API server rejects it)", req.Key, req.Operator)
		}
		if req.Operator == metav1.LabelSelectorOpIn {
			return present && in, nil
		}
		return !present || !in, nil
	case metav1.LabelSelectorOpExists, metav1.LabelSelectorOpDoesNotExist:
		if len(req.Values) > 0 {
			return false, fmt.Errorf("%s %s with values (the API server rejects it)", req.Key, req.Operator)
		}
		return present == (req.Operator == metav1.LabelSelectorOpExists), nil
	}
	return false, fmt.Errorf("unknown operator %q", req.Operator)
}

// inBlock reports whether addr is in the ipBlock: in cidr and in none of except. An
// address of the other family is in no block.
func inBlock(b *networkingv1.IPBlock, addr netip.Addr) (bool, error) {
	cidr, err := netip.ParsePrefix(b.CIDR)
	if err != nil {
		return false, fmt.Errorf("ipBlock cidr %q: %w", b.CIDR, err)
	}
	if !cidr.Contains(addr) {
		return false, nil
	}
	for _, e := range b.Except {
		ex, err := netip.ParsePrefix(e)
		if err != nil {
			return false, fmt.Errorf("ipBlock except %q: %w", e, err)
		}
		if ex.Contains(addr) {
			return false, nil
		}
	}
	return true, nil
}

// portsMatch reports whether one of a rule's ports matches the connection (no ports: all
// of them do). dst is the destination, whose container ports name ports.
func portsMatch(ports []networkingv1.NetworkPolicyPort, dst end, conn Connection) (bool, error) {
	if len(ports) == 0 {
		return true, nil
	}
	for _, p := range ports {
		ok, err := portMatches(p, dst, conn)
		if err != nil || ok {
			return ok, err
		}
	}
	return false, nil
}

func portMatches(p networkingv1.NetworkPolicyPort, dst end, conn Connection) (bool, error) {
	proto := corev1.ProtocolTCP
	if p.Protocol != nil {
		proto = *p.Protocol
	}
	if proto != conn.Protocol {
		return false, nil
	}
	if p.Port == nil {
		if p.EndPort != nil {
			return false, fmt.Errorf("endPort without port (the API server rejects it)")
		}
		return true, nil // every port of the protocol
	}
	if p.Port.Type == intstr.String {
		if p.EndPort != nil {
			return false, fmt.Errorf("endPort with named port %q (the API server rejects it)", p.Port.StrVal)
		}
		return namedPortIs(p.Port.StrVal, proto, dst, conn.Port)
	}
	first, last := p.Port.IntVal, p.Port.IntVal
	if p.EndPort != nil {
		if *p.EndPort < first {
			return false, fmt.Errorf("endPort %d below port %d (the API server rejects it)", *p.EndPort, first)
		}
		last = *p.EndPort
	}
	return first <= conn.Port && conn.Port <= last, nil
}

// namedPortIs reports whether the destination pod has a container port of that name and
// protocol with number port. A hostNetwork pod's address is its node's, which is no pod
// and has no named port, whatever the peer that matches it.
func namedPortIs(name string, proto corev1.Protocol, dst end, port int32) (bool, error) {
	if !dst.selectable() {
		return false, nil
	}
	for _, c := range dst.pod.Spec.Containers {
		for _, cp := range c.Ports {
			cpProto := cp.Protocol
			if cpProto == "" {
				cpProto = corev1.ProtocolTCP
			}
			if cp.Name == name && cpProto == proto {
				return cp.ContainerPort == port, nil
			}
		}
	}
	return false, nil
}
