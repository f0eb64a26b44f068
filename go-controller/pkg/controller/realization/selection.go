package realization

import (
	"strconv"
	"strings"
	"sync"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"

	"github.com/kovs-net/kovs/go-controller/pkg/labelindex"
	"github.com/kovs-net/kovs/go-controller/pkg/policy"
)

// selectable reports whether NetworkPolicy selects the pod where it runs: scheduled, not
// host-network, not finished (as the compiler decides).
func selectable(p *corev1.Pod) bool {
	return p.Spec.NodeName != "" && !p.Spec.HostNetwork &&
		p.Status.Phase != corev1.PodSucceeded && p.Status.Phase != corev1.PodFailed
}

// expectations returns what the policy expects on each node it concerns, from the Pod
// informer's indexer (with the podLabelsIndex).
func expectations(np *networkingv1.NetworkPolicy, pods cache.Indexer) (map[string]*onNode, error) {
	sel, err := metav1.LabelSelectorAsSelector(&np.Spec.PodSelector)
	if err != nil {
		return nil, nil // an invalid selector selects nothing, for the compiler too
	}
	list, err := selectedPods(pods, np.Namespace, sel)
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

// podLabelsIndex indexes the Pods by namespace and label (podLabelPairs), so that the
// pods a policy selects are found without listing its namespace.
const podLabelsIndex = "realization-pod-labels"

// podLabelPairs returns a pod's index values: "namespace/key=value" for each of its
// labels. (A namespace has no "/" and a label key no "=": the value is unambiguous.)
func podLabelPairs(obj interface{}) ([]string, error) {
	p, ok := obj.(*corev1.Pod)
	if !ok {
		return nil, nil
	}
	out := make([]string, 0, len(p.Labels))
	for k, v := range p.Labels {
		out = append(out, labelPair(p.Namespace, k, v))
	}
	return out, nil
}

func labelPair(namespace, key, value string) string { return namespace + "/" + key + "=" + value }

// selectedPods returns the pods of the namespace that sel selects. A selector that
// requires a label value (matchLabels, "in") looks up the pods with those values in
// podLabelsIndex, so that a policy per pod costs its own pods, not the namespace's; one
// that requires none (everything, "exists", "notin", "doesnotexist") lists the namespace.
func selectedPods(pods cache.Indexer, namespace string, sel labels.Selector) ([]*corev1.Pod, error) {
	var out []*corev1.Pod
	key, values := labelindex.RequiredValues(sel)
	if key == "" {
		err := cache.ListAllByNamespace(pods, namespace, sel, func(obj interface{}) {
			if p, ok := obj.(*corev1.Pod); ok {
				out = append(out, p)
			}
		})
		return out, err
	}
	for _, v := range values { // a pod has one value of key: it is found once
		objs, err := pods.ByIndex(podLabelsIndex, labelPair(namespace, key, v))
		if err != nil {
			return nil, err
		}
		for _, obj := range objs {
			if p, ok := obj.(*corev1.Pod); ok && sel.Matches(labels.Set(p.Labels)) {
				out = append(out, p)
			}
		}
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

// policySelectors finds the policies that select a pod: per namespace, the policies'
// podSelectors, parsed once per policy version and filed in a label index (package
// labelindex), so that a pod event neither lists nor parses every policy of its
// namespace. The NetworkPolicy informer's handler keeps it. Safe for concurrent use.
type policySelectors struct {
	mu          sync.Mutex
	byNamespace map[string]*labelindex.Index[string] // of policy keys "namespace/name"
}

func newPolicySelectors() *policySelectors {
	return &policySelectors{byNamespace: map[string]*labelindex.Index[string]{}}
}

// handler keeps the index from the NetworkPolicy informer.
func (x *policySelectors) handler() cache.ResourceEventHandler {
	return cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj interface{}) { x.set(obj) },
		UpdateFunc: func(_, obj interface{}) { x.set(obj) },
		DeleteFunc: func(obj interface{}) {
			if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = tomb.Obj
			}
			if np, ok := obj.(*networkingv1.NetworkPolicy); ok {
				x.remove(np.Namespace, np.Namespace+"/"+np.Name)
			}
		},
	}
}

// set files a policy under its podSelector; an invalid one selects nothing (as for the
// compiler).
func (x *policySelectors) set(obj interface{}) {
	np, ok := obj.(*networkingv1.NetworkPolicy)
	if !ok {
		return
	}
	key := np.Namespace + "/" + np.Name
	sel, err := metav1.LabelSelectorAsSelector(&np.Spec.PodSelector)
	if err != nil {
		x.remove(np.Namespace, key)
		return
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	idx := x.byNamespace[np.Namespace]
	if idx == nil {
		idx = labelindex.New[string]()
		x.byNamespace[np.Namespace] = idx
	}
	idx.Add(key, sel)
}

func (x *policySelectors) remove(namespace, key string) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if idx := x.byNamespace[namespace]; idx != nil {
		idx.Remove(key)
		if idx.Len() == 0 {
			delete(x.byNamespace, namespace)
		}
	}
}

// selecting returns the keys of the policies of the namespace that select pods with
// these labels.
func (x *policySelectors) selecting(namespace string, podLabels map[string]string) []string {
	x.mu.Lock()
	defer x.mu.Unlock()
	var keys []string
	if idx := x.byNamespace[namespace]; idx != nil {
		idx.Matching(labels.Set(podLabels), func(key string) { keys = append(keys, key) })
	}
	return keys
}
