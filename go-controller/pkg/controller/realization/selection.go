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
	corelisters "k8s.io/client-go/listers/core/v1"
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
