package kovsctl

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
)

// isolatedDirections are the directions in which a NetworkPolicy isolates a pod: none
// unless it is in the pod's namespace and its podSelector selects the pod; then its
// policyTypes (or, for an object without them, Ingress, and Egress when it has egress
// rules, as the API defines). hostNetwork pods are never selected.
func isolatedDirections(np *networkingv1.NetworkPolicy, pod *corev1.Pod) []networkingv1.PolicyType {
	if np.Namespace != pod.Namespace || pod.Spec.HostNetwork {
		return nil
	}
	sel, err := metav1.LabelSelectorAsSelector(&np.Spec.PodSelector)
	if err != nil || !sel.Matches(labels.Set(pod.Labels)) {
		return nil
	}
	if len(np.Spec.PolicyTypes) > 0 {
		return np.Spec.PolicyTypes
	}
	types := []networkingv1.PolicyType{networkingv1.PolicyTypeIngress}
	if len(np.Spec.Egress) > 0 {
		types = append(types, networkingv1.PolicyTypeEgress)
	}
	return types
}

// isolation is why a pod is isolated in one direction: the NetworkPolicies that select it
// for that direction and their rules in that direction.
type isolation struct {
	Policies []string // ns/name
	Rules    []string // "ns/name ingress rule 0"
}

// isolationOf reads, from the API, the NetworkPolicies that isolate a pod in a direction.
func (a Access) isolationOf(ctx context.Context, namespace, name string, dir networkingv1.PolicyType) (isolation, error) {
	pod, err := a.Client.CoreV1().Pods(namespace).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return isolation{}, err
	}
	list, err := a.Client.NetworkingV1().NetworkPolicies(namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return isolation{}, err
	}
	sort.Slice(list.Items, func(i, j int) bool { return list.Items[i].Name < list.Items[j].Name })
	var iso isolation
	for i := range list.Items {
		np := &list.Items[i]
		if !slices.Contains(isolatedDirections(np, pod), dir) {
			continue
		}
		iso.Policies = append(iso.Policies, np.Namespace+"/"+np.Name)
		n := len(np.Spec.Ingress)
		if dir == networkingv1.PolicyTypeEgress {
			n = len(np.Spec.Egress)
		}
		for r := 0; r < n; r++ {
			iso.Rules = append(iso.Rules, fmt.Sprintf("%s/%s %s rule %d", np.Namespace, np.Name, strings.ToLower(string(dir)), r))
		}
	}
	return iso, nil
}

// describe tells why: "isolated for ingress by NetworkPolicy x/db; none of its ingress
// rules (x/db ingress rule 0) allows this packet".
func (iso isolation) describe(dir string) string {
	if len(iso.Policies) == 0 {
		return "isolated for " + dir + " (no NetworkPolicy in the API selects it for " + dir + " now: the flows may be stale, see kovsctl policies)"
	}
	s := "isolated for " + dir + " by NetworkPolicy " + strings.Join(iso.Policies, ", ")
	if len(iso.Rules) == 0 {
		return s + ", with no " + dir + " rules (deny all)"
	}
	their := "its"
	if len(iso.Policies) > 1 {
		their = "their"
	}
	return s + "; none of " + their + " " + dir + " rules (" + strings.Join(iso.Rules, ", ") + ") allows this packet"
}
