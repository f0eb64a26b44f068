package harness

import (
	"fmt"
	"math/rand/v2"
	"sync"
)

// podRef names a pod of the workload.
type podRef struct{ Namespace, Name string }

// selector is what a workload policy selects: the pods of one namespace with the label
// app-<App>: scale-<App> (bench shape (a)'s np-1 and np-2).
type selector struct {
	Namespace string
	App       int
}

// model is the harness's own record of where the workload's pods are: which nodes a
// policy change concerns, and how many of each node's pods it selects (its span).
type model struct {
	mu     sync.Mutex
	pods   map[podRef]podPlace
	bySel  map[selector]map[podRef]struct{}
	nodes  []string
	spaces []string
	rng    *rand.Rand
}

type podPlace struct {
	Node string
	App  int
}

func newModel(nodes, namespaces []string, seed uint64) *model {
	return &model{pods: map[podRef]podPlace{}, bySel: map[selector]map[podRef]struct{}{},
		nodes: nodes, spaces: namespaces, rng: rand.New(rand.NewPCG(seed, 0x5ca1e))}
}

func nodeName(i int) string      { return fmt.Sprintf("sim-%05d", i) }
func namespaceName(i int) string { return fmt.Sprintf("scale-%05d", i) }

// place picks a node uniformly (as bench-shapes.md draws nodeName) and records the pod.
func (m *model) place(ref podRef, app int) podPlace {
	m.mu.Lock()
	node := m.nodes[m.rng.IntN(len(m.nodes))]
	m.mu.Unlock()
	return m.placeOn(ref, app, node)
}

// placeOn records a pod on the given node.
func (m *model) placeOn(ref podRef, app int, node string) podPlace {
	m.mu.Lock()
	defer m.mu.Unlock()
	p := podPlace{Node: node, App: app}
	m.add(ref, p)
	return p
}

func (m *model) add(ref podRef, p podPlace) {
	m.pods[ref] = p
	sel := selector{ref.Namespace, p.App}
	if m.bySel[sel] == nil {
		m.bySel[sel] = map[podRef]struct{}{}
	}
	m.bySel[sel][ref] = struct{}{}
}

func (m *model) remove(ref podRef) {
	m.mu.Lock()
	defer m.mu.Unlock()
	p, ok := m.pods[ref]
	if !ok {
		return
	}
	delete(m.pods, ref)
	delete(m.bySel[selector{ref.Namespace, p.App}], ref)
}

// randomPod returns a pod of the model, or false if there is none.
func (m *model) randomPod() (podRef, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for ref := range m.pods { // map order is random enough for churn
		return ref, true
	}
	return podRef{}, false
}

// randomSelector picks a namespace and a label.
func (m *model) randomSelector() selector {
	m.mu.Lock()
	defer m.mu.Unlock()
	return selector{Namespace: m.spaces[m.rng.IntN(len(m.spaces))], App: 1 + m.rng.IntN(2)}
}

// spans counts the pods sel selects on each node: the nodes a change of a policy with
// that selector concerns, and by how much.
func (m *model) spans(sel selector) map[string]int {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := map[string]int{}
	for ref := range m.bySel[sel] {
		out[m.pods[ref].Node]++
	}
	return out
}

// hosts reports whether node still has a pod sel selects.
func (m *model) hosts(node string, sel selector) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	for ref := range m.bySel[sel] {
		if m.pods[ref].Node == node {
			return true
		}
	}
	return false
}
