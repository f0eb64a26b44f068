package networkpolicy

import (
	"fmt"
	"math/rand/v2"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
)

// The workload shapes of /work/shared/bench-shapes.md, which Antrea publishes for its
// controller: random names and UIDs, one random IPv4 per pod, nodeName uniform over 1,000
// node names (no Node objects), namespaces labelled {app: <name>}, policies of types
// [Ingress, Egress] with at most one ingress rule with one podSelector peer.

const benchNodes = 1000

// shape is a benchmark workload and the other controller's figures for it.
type shape struct {
	name string
	// generate returns the objects at the given scale (1 = the published shape).
	generate func(g *generator, scale float64) []runtime.Object
	// rules is the number of rules the compiler must produce at the given scale.
	rules func(scale float64) int
	// The other controller's figures for the shape, measured beside kovs in one run on
	// this machine kind (3 interleaved runs, medians; /work/shared/bench-shapes.md).
	antreaSeconds, antreaHeapMiB, antreaRSSMiB float64
	publishedDescription                       string
}

func shapes() []shape {
	return []shape{
		{name: "a-many-small-namespaces", generate: manySmallNamespaces,
			rules: func(scale float64) int { return 2 * scaled(25_000, scale) }, antreaSeconds: 8.02, antreaHeapMiB: 2077, antreaRSSMiB: 2252,
			publishedDescription: "25k namespaces, 100k pods, 75k policies"},
		{name: "b-one-big-namespace", generate: oneBigNamespace,
			rules: func(scale float64) int { return scaled(10_000, scale) }, antreaSeconds: 2.86, antreaHeapMiB: 861, antreaRSSMiB: 979,
			publishedDescription: "1 namespace, 10k pods, 10k policies each selecting every pod"},
	}
}

func scaled(n int, scale float64) int { return max(1, int(float64(n)*scale)) }

// manySmallNamespaces is shape (a): per namespace pods pod1, pod2 {app-1: scale-1} and
// pod3, pod4 {app-2: scale-2}, and policies default-deny-all, np-1 and np-2.
func manySmallNamespaces(g *generator, scale float64) []runtime.Object {
	var objs []runtime.Object
	app1, app2 := map[string]string{"app-1": "scale-1"}, map[string]string{"app-2": "scale-2"}
	for range scaled(25_000, scale) {
		ns := g.namespace()
		objs = append(objs, ns,
			g.pod(ns.Name, "pod1", app1), g.pod(ns.Name, "pod2", app1),
			g.pod(ns.Name, "pod3", app2), g.pod(ns.Name, "pod4", app2),
			g.policy(ns.Name, "default-deny-all", nil, nil),
			g.policy(ns.Name, "np-1", app1, app1),
			g.policy(ns.Name, "np-2", app2, app2))
	}
	return objs
}

// oneBigNamespace is shape (b): one namespace, 10k pods {app-1: scale-1} and 10k
// identical policies selecting them with ingress from them.
func oneBigNamespace(g *generator, scale float64) []runtime.Object {
	app1 := map[string]string{"app-1": "scale-1"}
	ns := g.namespace()
	objs := []runtime.Object{ns}
	n := scaled(10_000, scale)
	for range n {
		objs = append(objs, g.pod(ns.Name, g.name("pod-"), app1))
	}
	for range n {
		objs = append(objs, g.policy(ns.Name, g.name("np-"), app1, app1))
	}
	return objs
}

// generator makes random, unique names, UIDs and addresses.
type generator struct {
	rng  *rand.Rand
	used map[string]bool
}

func newGenerator(seed uint64) *generator {
	return &generator{rng: rand.New(rand.NewPCG(seed, seed+1)), used: map[string]bool{}}
}

const nameChars = "bcdfghjklmnpqrstvwxz2456789"

// name returns prefix plus 8 random characters, never twice the same.
func (g *generator) name(prefix string) string {
	for {
		b := make([]byte, 8)
		for i := range b {
			b[i] = nameChars[g.rng.IntN(len(nameChars))]
		}
		if s := prefix + string(b); !g.used[s] {
			g.used[s] = true
			return s
		}
	}
}

func (g *generator) uid() types.UID {
	return types.UID(fmt.Sprintf("%08x-%04x-4%03x-a%03x-%012x", g.rng.Uint32(), g.rng.Uint32()&0xffff,
		g.rng.Uint32()&0xfff, g.rng.Uint32()&0xfff, g.rng.Uint64()&0xffffffffffff))
}

func (g *generator) namespace() *corev1.Namespace {
	name := g.name("")
	return &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, UID: g.uid(), Labels: map[string]string{"app": name}}}
}

func (g *generator) pod(ns, name string, labels map[string]string) *corev1.Pod {
	ip := fmt.Sprintf("%d.%d.%d.%d", g.rng.IntN(256), g.rng.IntN(256), g.rng.IntN(256), g.rng.IntN(256))
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: g.uid(), Labels: labels},
		Spec:       corev1.PodSpec{NodeName: fmt.Sprint("node-", g.rng.IntN(benchNodes))},
		Status:     corev1.PodStatus{PodIP: ip, PodIPs: []corev1.PodIP{{IP: ip}}},
	}
}

// policy selects selector (nil: every pod) and, when from is set, allows ingress from
// the pods of the namespace it selects. It isolates both directions.
func (g *generator) policy(ns, name string, selector, from map[string]string) *networkingv1.NetworkPolicy {
	np := &networkingv1.NetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: g.uid()},
		Spec: networkingv1.NetworkPolicySpec{
			PodSelector: metav1.LabelSelector{MatchLabels: selector},
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress, networkingv1.PolicyTypeEgress},
		},
	}
	if from != nil {
		np.Spec.Ingress = []networkingv1.NetworkPolicyIngressRule{{
			From: []networkingv1.NetworkPolicyPeer{{PodSelector: &metav1.LabelSelector{MatchLabels: from}}},
		}}
	}
	return np
}
