package networkpolicy

import (
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/kovs-net/kovs/go-controller/pkg/policy"
)

// Compile computes every node's share from scratch, in one batch: the reference the
// incremental Compiler is tested against, and a fixture for tests of the agent. Nodes
// without selectable pods have no share (their share is empty). The shares' maps may be
// shared (see Compiler.Watch): Clone one before changing it.
func Compile(namespaces []*corev1.Namespace, pods []*corev1.Pod, policies []*networkingv1.NetworkPolicy) map[string]policy.NodeShare {
	m := newModel()
	for _, ns := range namespaces {
		m.setNamespace(ns.Name, ns)
	}
	for _, p := range pods {
		m.setPod(podKey(p), p)
	}
	for _, np := range policies {
		m.setPolicy(types.NamespacedName{Namespace: np.Namespace, Name: np.Name}, np)
	}
	m.commit()
	shares := make(map[string]policy.NodeShare, len(m.nodes))
	for name, n := range m.nodes {
		shares[name] = m.snapshot(n)
	}
	return shares
}

// Stats counts what the compiler holds: AddressSets and Rules are distinct objects
// (shared by the nodes that need them), Subscribers the open Watches.
type Stats struct {
	Namespaces, Pods, Policies int
	Groups, AddressSets, Rules int
	Nodes, Subscribers         int
}

func (m *model) stats() Stats {
	st := Stats{Namespaces: len(m.namespaces), Pods: len(m.pods), Policies: len(m.policies),
		Groups: len(m.groups), AddressSets: len(m.blocks), Nodes: len(m.nodes)}
	for _, g := range m.groups {
		if g.addr != nil {
			st.AddressSets++
		}
	}
	for _, ps := range m.policies {
		st.Rules += len(ps.rules)
	}
	for n := range m.watched {
		st.Subscribers += len(n.subs)
	}
	return st
}
