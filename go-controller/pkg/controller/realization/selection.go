package realization

import (
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	corelisters "k8s.io/client-go/listers/core/v1"

	"github.com/kovs-net/kovs/go-controller/pkg/policy"
)

// selectable reports whether NetworkPolicy selects the pod where it runs: scheduled, not
// host-network, not finished (as the compiler decides).
func selectable(p *corev1.Pod) bool {
	return p.Spec.NodeName != "" && !p.Spec.HostNetwork &&
		p.Status.Phase != corev1.PodSucceeded && p.Status.Phase != corev1.PodFailed
}

// expectations returns what the policy expects on each node it concerns.
func expectations(np *networkingv1.NetworkPolicy, pods corelisters.PodLister) (map[string]*onNode, error) {
	sel, err := metav1.LabelSelectorAsSelector(&np.Spec.PodSelector)
	if err != nil {
		return nil, nil // an invalid selector selects nothing, for the compiler too
	}
	list, err := pods.Pods(np.Namespace).List(sel)
	if err != nil {
		return nil, err
	}
	key := types.NamespacedName{Namespace: np.Namespace, Name: np.Name}
	isolates, rules := isolation(np), expectedRules(np)
	out := map[string]*onNode{}
	for _, p := range list {
		if !selectable(p) {
			continue
		}
		n, ok := out[p.Spec.NodeName]
		if !ok {
			n = &onNode{key: key, uid: string(np.UID), isolates: isolates, rules: rules}
			out[p.Spec.NodeName] = n
		}
		n.pods = append(n.pods, policy.PodKey{Namespace: p.Namespace, Name: p.Name, UID: string(p.UID)})
	}
	return out, nil
}

// isolation returns the directions the policy isolates, defaulted as the API server does:
// Ingress always, Egress when it has egress rules.
func isolation(np *networkingv1.NetworkPolicy) [2]bool {
	if len(np.Spec.PolicyTypes) == 0 {
		return [2]bool{true, len(np.Spec.Egress) > 0}
	}
	var out [2]bool
	for _, t := range np.Spec.PolicyTypes {
		switch t {
		case networkingv1.PolicyTypeIngress:
			out[0] = true
		case networkingv1.PolicyTypeEgress:
			out[1] = true
		}
	}
	return out
}

// expectedRules returns the IDs of the rules that must be in the share of every node the
// policy concerns: those of the directions it isolates whose ports are all numbers (a
// named port splits a rule per resolved number, present only where the name resolves).
func expectedRules(np *networkingv1.NetworkPolicy) []string {
	iso := isolation(np)
	var ids []string
	add := func(dir policy.Direction, i int, ports []networkingv1.NetworkPolicyPort) {
		for _, p := range ports {
			if p.Port != nil && p.Port.Type != 0 { // a name
				return
			}
		}
		ids = append(ids, RuleID(np.Namespace, np.Name, dir, i))
	}
	if iso[0] {
		for i, r := range np.Spec.Ingress {
			add(policy.Ingress, i, r.Ports)
		}
	}
	if iso[1] {
		for i, r := range np.Spec.Egress {
			add(policy.Egress, i, r.Ports)
		}
	}
	return ids
}

// RuleID is the ID of a policy rule as package policy defines it:
// "<namespace>/<policy>/<ingress|egress>/<index>".
func RuleID(namespace, name string, dir policy.Direction, index int) string {
	return namespace + "/" + name + "/" + strings.ToLower(string(dir)) + "/" + strconv.Itoa(index)
}

// selects reports whether the policy selects pods with these labels.
func selects(np *networkingv1.NetworkPolicy, podLabels map[string]string) bool {
	sel, err := metav1.LabelSelectorAsSelector(&np.Spec.PodSelector)
	return err == nil && sel.Matches(labels.Set(podLabels))
}
