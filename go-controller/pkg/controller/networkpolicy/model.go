package networkpolicy

import (
	"net/netip"
	"slices"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"

	"github.com/kovs-net/kovs/go-controller/pkg/labelindex"
	"github.com/kovs-net/kovs/go-controller/pkg/policy"
)

// model is the compiler's state: the cluster as NetworkPolicy sees it (namespaces,
// selectable pods, policies), the groups and rules compiled from it, and every node's
// share as references into them. It is not safe for concurrent use: the Compiler guards
// it with a lock, and only its worker changes it.
type model struct {
	namespaces map[string]*namespace
	pods       map[types.NamespacedName]*pod
	policies   map[types.NamespacedName]*policyState

	selectors selectors
	groups    map[groupKey]*group
	// nsGroups indexes the namespace-scoped groups by namespace; clusterGroups indexes
	// the groups with a namespaceSelector by the labels it requires. A pod change only
	// evaluates the groups of its namespace and those clusterGroups finds for its
	// namespace's labels.
	nsGroups      map[string]map[*group]struct{}
	clusterGroups *labelindex.Index[*group]
	// nsByLabel indexes the namespaces by label, so that a new group with a
	// namespaceSelector fills from the namespaces that have the labels it requires.
	nsByLabel map[[2]string]map[*namespace]struct{}
	blocks    map[string]*addrSet // ipBlock sets, by key
	nodes     map[string]*node
	// watched are the nodes that have subscribers.
	watched map[*node]struct{}

	generation uint64
	batch      batch
	// gone are the pods removed since a Feed last took them (recorded only while a Feed
	// follows the model).
	gone      []gonePod
	trackGone bool
	// clusterEvaluated is where the ClusterNetworkPolicy feed's last batch evaluated each
	// pod (the node it gave the pod's rules to); nil while no feed has sent a batch, when
	// the shares list pods without waiting for one (see listable).
	clusterEvaluated map[policy.PodKey]string
}

// gonePod is a pod removed from the model: deleted, terminated, or replaced by one of
// another UID.
type gonePod struct {
	key policy.PodKey
	ips []netip.Addr
}

// batch is what the current batch of changes touched.
type batch struct {
	changedGroups []*group
	// dirtyPolicies must be recompiled: their named ports may resolve differently.
	dirtyPolicies map[*policyState]struct{}
	// touched are the nodes whose share received events: they move to the batch's
	// generation, and their subscribers are told.
	touched map[*node]struct{}
	changed bool
}

func newModel() *model {
	return &model{
		namespaces:    map[string]*namespace{},
		pods:          map[types.NamespacedName]*pod{},
		policies:      map[types.NamespacedName]*policyState{},
		selectors:     newSelectors(),
		groups:        map[groupKey]*group{},
		nsGroups:      map[string]map[*group]struct{}{},
		clusterGroups: labelindex.New[*group](),
		nsByLabel:     map[[2]string]map[*namespace]struct{}{},
		blocks:        map[string]*addrSet{},
		nodes:         map[string]*node{},
		watched:       map[*node]struct{}{},
		batch:         newBatch(),
	}
}

func newBatch() batch {
	return batch{
		dirtyPolicies: map[*policyState]struct{}{},
		touched:       map[*node]struct{}{},
	}
}

// namespace returns the namespace called name, creating it without labels if needed.
func (m *model) namespace(name string) *namespace {
	ns, ok := m.namespaces[name]
	if !ok {
		ns = &namespace{name: name, pods: map[*pod]struct{}{}}
		m.namespaces[name] = ns
	}
	return ns
}

// node returns the node called name, creating it if needed.
func (m *model) node(name string) *node {
	n, ok := m.nodes[name]
	if !ok {
		n = &node{name: name, groups: map[*group]struct{}{}, addrRefs: map[*addrSet]int{}, pods: map[*pod]struct{}{},
			generation: m.generation}
		m.nodes[name] = n
	}
	return n
}

// setNamespace records a Namespace (nil: deleted). A label change moves the namespace's
// pods in and out of the groups whose namespaceSelector it starts or stops matching.
func (m *model) setNamespace(name string, obj *corev1.Namespace) {
	m.batch.changed = true
	ns := m.namespace(name)
	old := ns.labels
	if obj == nil {
		ns.labels, ns.known = nil, false
	} else {
		ns.labels, ns.known = obj.Labels, true
	}
	m.indexLabels(ns, old)
	m.clusterGroups.Matching(old, func(g *group) {
		if g.nsSelector.Matches(ns.labels) {
			return
		}
		for p := range ns.pods {
			if p.memberOf(g) {
				m.removeMember(g, p)
				p.leave(g)
			}
		}
	})
	m.clusterGroups.Matching(ns.labels, func(g *group) {
		if g.nsSelector.Matches(old) {
			return
		}
		for p := range ns.pods {
			if g.matchesPod(p) {
				m.addMember(g, p)
			}
		}
	})
	m.forgetNamespace(ns)
}

// indexLabels moves ns in nsByLabel from its old labels to its current ones.
func (m *model) indexLabels(ns *namespace, old labels.Set) {
	for k, v := range old {
		if byNs := m.nsByLabel[[2]string{k, v}]; byNs != nil {
			delete(byNs, ns)
			if len(byNs) == 0 {
				delete(m.nsByLabel, [2]string{k, v})
			}
		}
	}
	for k, v := range ns.labels {
		byNs := m.nsByLabel[[2]string{k, v}]
		if byNs == nil {
			byNs = map[*namespace]struct{}{}
			m.nsByLabel[[2]string{k, v}] = byNs
		}
		byNs[ns] = struct{}{}
	}
}

// forgetNamespace drops a namespace the model no longer needs.
func (m *model) forgetNamespace(ns *namespace) {
	if !ns.known && len(ns.pods) == 0 {
		delete(m.namespaces, ns.name)
	}
}

// setPod records a Pod (nil: deleted). A pod that is not selectable is as good as
// deleted. A change of labels re-evaluates only the groups of its namespace and the
// groups with a namespaceSelector.
func (m *model) setPod(key types.NamespacedName, obj *corev1.Pod) {
	m.batch.changed = true
	p := m.pods[key]
	if obj == nil || !selectable(obj) {
		if p != nil {
			m.removePod(p)
		}
		return
	}
	if p != nil && (p.uid != string(obj.UID) || p.nodeName() != obj.Spec.NodeName) {
		m.removePod(p)
		p = nil
	}
	var n *node
	if obj.Spec.NodeName != "" {
		n = m.node(obj.Spec.NodeName)
	}
	ips := podIPs(obj)
	if p == nil {
		m.addPod(key, obj, n, ips)
		return
	}
	m.updatePod(p, obj.Labels, ips)
}

func (m *model) addPod(key types.NamespacedName, obj *corev1.Pod, n *node, ips []netip.Addr) {
	p := &pod{key: key, ns: m.namespace(key.Namespace), uid: string(obj.UID), labels: obj.Labels,
		node: n, ips: ips, ports: podNamedPorts(obj)}
	m.pods[key] = p
	p.ns.pods[p] = struct{}{}
	if n != nil {
		n.pods[p] = struct{}{}
		m.list(p)
	}
	m.eachCandidate(p.ns, func(g *group) {
		if g.matchesPod(p) {
			m.addMember(g, p)
		}
	})
}

func (m *model) removePod(p *pod) {
	if m.trackGone {
		m.gone = append(m.gone, gonePod{key: p.apiKey(), ips: p.ips})
	}
	for _, g := range p.groups {
		m.removeMember(g, p)
	}
	p.groups = nil
	delete(m.pods, p.key)
	delete(p.ns.pods, p)
	m.forgetNamespace(p.ns)
	if p.node != nil {
		delete(p.node.pods, p)
		if p.listed {
			m.emitPod(p.node, p.apiKey(), opRemove)
		}
		m.forgetNode(p.node)
	}
}

// updatePod changes the labels and addresses of a pod that keeps its identity and node.
func (m *model) updatePod(p *pod, podLabels labels.Set, ips []netip.Addr) {
	moved := !slices.Equal(p.ips, ips)
	if moved {
		for _, g := range p.groups {
			g.countAddrs(p, -1) // its old addresses out of g's set, its new ones in
		}
	}
	p.labels, p.ips = podLabels, ips
	if moved {
		for _, g := range p.groups {
			g.countAddrs(p, 1)
		}
	}
	for i := 0; i < len(p.groups); {
		g := p.groups[i]
		if g.matchesPod(p) {
			if moved {
				m.memberChanged(g, p)
			}
			i++
			continue
		}
		m.removeMember(g, p)
		p.leave(g) // moves the last group to i
	}
	m.eachCandidate(p.ns, func(g *group) {
		if !p.memberOf(g) && g.matchesPod(p) {
			m.addMember(g, p)
		}
	})
}

// eachCandidate calls f for every group a pod of ns could be a member of: the groups of
// ns and the groups whose namespaceSelector matches ns.
func (m *model) eachCandidate(ns *namespace, f func(*group)) {
	for g := range m.nsGroups[ns.name] {
		f(g)
	}
	m.clusterGroups.Matching(ns.labels, f)
}
