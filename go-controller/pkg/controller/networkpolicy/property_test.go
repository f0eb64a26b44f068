package networkpolicy

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/kovs-net/kovs/go-controller/pkg/controller/ipam"
	"github.com/kovs-net/kovs/go-controller/pkg/policy"
)

// TestIncrementalEqualsScratch applies random sequences of namespace, pod and policy
// events in random batches, and checks after every batch that (1) every node's share
// equals a from-scratch compile of the same objects and (2) every subscriber that took its
// delta after the batch holds the node's share, built from its snapshot and the deltas it
// received, at the generation a new subscriber's snapshot would have. Subscribers take
// their deltas only some of the time, as a busy receiver does, so that two subscribers of
// one node fold different runs of batches into their deltas.
func TestIncrementalEqualsScratch(t *testing.T) {
	seeds := 150
	if testing.Short() {
		seeds = 30
	}
	defer func(n int) { countedMin = n }(countedMin)
	for seed := range seeds {
		// Odd seeds count the addresses of every address set with any (addrSet.count),
		// even seeds list them again at each batch, as the small sets do.
		countedMin = map[bool]int{true: 1, false: 1 << 30}[seed%2 == 1]
		r := &randomCluster{rng: rand.New(rand.NewPCG(uint64(seed), 7)), ns: map[string]*corev1.Namespace{},
			pods: map[types.NamespacedName]*corev1.Pod{}, policies: map[types.NamespacedName]*networkingv1.NetworkPolicy{}}
		if !t.Run(fmt.Sprint("seed-", seed), r.run) {
			return
		}
	}
}

type randomCluster struct {
	rng      *rand.Rand
	ns       map[string]*corev1.Namespace
	pods     map[types.NamespacedName]*corev1.Pod
	policies map[types.NamespacedName]*networkingv1.NetworkPolicy
	serial   int
}

type watcher struct {
	sub   *subscriber
	share policy.NodeShare
	// caughtUp: the watcher took its delta after the last batch.
	caughtUp bool
}

func (r *randomCluster) run(t *testing.T) {
	m := newModel()
	var watchers []*watcher
	for batch := 0; batch < 40; batch++ {
		for range 1 + r.rng.IntN(6) {
			r.event(m)
		}
		m.commit()
		if r.rng.IntN(4) == 0 {
			node := fmt.Sprint("node-", r.rng.IntN(4))
			s, share := m.subscribe(node)
			share = share.Clone() // its maps may be the model's
			watchers = append(watchers, &watcher{sub: s, share: share, caughtUp: true})
		}
		if len(watchers) > 0 && r.rng.IntN(10) == 0 {
			i := r.rng.IntN(len(watchers))
			m.unsubscribe(watchers[i].sub)
			watchers = slices.Delete(watchers, i, i+1)
		}
		for _, w := range watchers {
			if w.caughtUp = r.rng.IntN(3) > 0; !w.caughtUp {
				continue
			}
			if d, ok := m.delta(w.sub); ok {
				if err := d.Apply(&w.share); err != nil {
					t.Fatalf("batch %d: node %s: %v", batch, w.share.Node, err)
				}
			}
		}
		r.check(t, batch, m, watchers)
	}
}

func (r *randomCluster) check(t *testing.T, batch int, m *model, watchers []*watcher) {
	t.Helper()
	scratch := Compile(sortedValues(r.ns), sortedValues(r.pods), sortedValues(r.policies))
	for name := range 4 {
		node := fmt.Sprint("node-", name)
		incremental := policy.NewNodeShare(node)
		if n, ok := m.nodes[node]; ok {
			incremental = m.snapshot(n)
		}
		want, ok := scratch[node]
		if !ok {
			want = policy.NewNodeShare(node)
		}
		if a, b := shareJSON(t, incremental), shareJSON(t, want); !bytes.Equal(a, b) {
			t.Fatalf("batch %d: %s incremental share differs from scratch:\nincremental %s\nscratch     %s", batch, node, a, b)
		}
		if err := incremental.Validate(); err != nil {
			t.Fatalf("batch %d: %s: %v", batch, node, err)
		}
	}
	for _, w := range watchers {
		if !w.caughtUp {
			continue
		}
		snap := m.snapshot(w.sub.node)
		if a, b := shareJSON(t, w.share), shareJSON(t, snap); !bytes.Equal(a, b) {
			t.Fatalf("batch %d: subscriber of %s drifted:\nsubscriber %s\nnode       %s", batch, w.share.Node, a, b)
		}
		if w.share.Generation != snap.Generation {
			t.Fatalf("batch %d: a caught-up subscriber of %s is at generation %d, a new one would start at %d",
				batch, w.share.Node, w.share.Generation, snap.Generation)
		}
	}
}

// shareJSON encodes a share without its generation, so that nil and empty lists compare
// equal and maps are in key order.
func shareJSON(t *testing.T, s policy.NodeShare) []byte {
	s.Generation = 0
	b, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func sortedValues[K comparable, V any](m map[K]V) []V {
	keys := make([]string, 0, len(m))
	byKey := map[string]V{}
	for k, v := range m {
		s := fmt.Sprint(k)
		keys = append(keys, s)
		byKey[s] = v
	}
	slices.Sort(keys)
	out := make([]V, len(keys))
	for i, k := range keys {
		out[i] = byKey[k]
	}
	return out
}

// event applies one random change to both the cluster and the model.
func (r *randomCluster) event(m *model) {
	switch r.rng.IntN(10) {
	case 0, 1:
		ns := r.namespace()
		if r.rng.IntN(5) == 0 {
			delete(r.ns, ns.Name)
			m.setNamespace(ns.Name, nil)
			return
		}
		r.ns[ns.Name] = ns
		m.setNamespace(ns.Name, ns)
	case 2, 3, 4, 5:
		p := r.pod()
		key := podKey(p)
		if r.rng.IntN(6) == 0 {
			delete(r.pods, key)
			m.setPod(key, nil)
			return
		}
		if old, ok := r.pods[key]; ok && r.rng.IntN(3) > 0 {
			p.UID, p.Spec.NodeName, p.Spec.Containers = old.UID, old.Spec.NodeName, old.Spec.Containers
		}
		r.pods[key] = p
		m.setPod(key, p)
	default:
		np := r.policy()
		key := types.NamespacedName{Namespace: np.Namespace, Name: np.Name}
		if r.rng.IntN(5) == 0 {
			delete(r.policies, key)
			m.setPolicy(key, nil)
			return
		}
		r.policies[key] = np
		m.setPolicy(key, np)
	}
}

func (r *randomCluster) pick(options ...string) string { return options[r.rng.IntN(len(options))] }

func (r *randomCluster) labels(pool ...string) map[string]string {
	out := map[string]string{}
	for range r.rng.IntN(3) {
		kv := labelSet(r.pick(pool...))
		for k, v := range kv {
			out[k] = v
		}
	}
	return out
}

func (r *randomCluster) namespace() *corev1.Namespace {
	name := r.pick("ns-a", "ns-b", "ns-c")
	return &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: r.labels("team=red", "team=blue", "env=prod", "env=dev")}}
}

func (r *randomCluster) pod() *corev1.Pod {
	r.serial++
	ns, name := r.pick("ns-a", "ns-b", "ns-c"), r.pick("p0", "p1", "p2", "p3", "p4", "p5")
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID(fmt.Sprint("uid-", r.serial)),
			Labels: r.labels("app=web", "app=db", "tier=fe", "tier=be")},
		Spec:   corev1.PodSpec{NodeName: r.pick("node-0", "node-1", "node-2", "node-3", "")},
		Status: corev1.PodStatus{Phase: corev1.PodRunning},
	}
	p.Spec.HostNetwork = r.rng.IntN(12) == 0
	if r.rng.IntN(10) == 0 {
		p.Status.Phase = corev1.PodSucceeded
	}
	ip := fmt.Sprint("10.0.0.", r.rng.IntN(12))
	switch r.rng.IntN(5) {
	case 0: // no address yet
	case 1:
		p.Status.PodIPs = []corev1.PodIP{{IP: ip}, {IP: fmt.Sprint("fd00::", r.rng.IntN(12))}}
	case 2: // a forged record of the old annotation, no address of its own yet
		p.Annotations = map[string]string{ipam.PodNetworkAnnotationKey: podNetworkAnnotation(ip+"/24", "10.0.0.254")}
	default:
		p.Status.PodIPs = []corev1.PodIP{{IP: ip}}
	}
	c := corev1.Container{Name: "c"}
	if r.rng.IntN(2) == 0 {
		c.Ports = append(c.Ports, corev1.ContainerPort{Name: "http", ContainerPort: int32(r.pick2(80, 8080))})
	}
	if r.rng.IntN(2) == 0 {
		c.Ports = append(c.Ports, corev1.ContainerPort{Name: "dns", ContainerPort: int32(r.pick2(53, 5353)), Protocol: corev1.ProtocolUDP})
	}
	p.Spec.Containers = []corev1.Container{c}
	return p
}

func (r *randomCluster) pick2(a, b int) int {
	if r.rng.IntN(2) == 0 {
		return a
	}
	return b
}

func (r *randomCluster) selector(pool ...string) *metav1.LabelSelector {
	switch r.rng.IntN(4) {
	case 0:
		return &metav1.LabelSelector{}
	case 1:
		kv := labelSet(r.pick(pool...))
		for k := range kv {
			ops := []metav1.LabelSelectorOperator{metav1.LabelSelectorOpIn, metav1.LabelSelectorOpNotIn,
				metav1.LabelSelectorOpExists, metav1.LabelSelectorOpDoesNotExist}
			req := metav1.LabelSelectorRequirement{Key: k, Operator: ops[r.rng.IntN(len(ops))]}
			if req.Operator == metav1.LabelSelectorOpIn || req.Operator == metav1.LabelSelectorOpNotIn {
				req.Values = []string{kv[k]}
			}
			return &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{req}}
		}
	}
	return &metav1.LabelSelector{MatchLabels: r.labels(pool...)}
}

func (r *randomCluster) policy() *networkingv1.NetworkPolicy {
	r.serial++
	ns, name := r.pick("ns-a", "ns-b", "ns-c"), r.pick("np0", "np1", "np2", "np3")
	np := &networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID(fmt.Sprint("np-", r.serial%3))}}
	np.Spec.PodSelector = *r.selector("app=web", "app=db", "tier=fe", "tier=be")
	np.Spec.PolicyTypes = [][]networkingv1.PolicyType{nil, ingressOnly(), egressOnly(), bothTypes()}[r.rng.IntN(4)]
	for range r.rng.IntN(3) {
		np.Spec.Ingress = append(np.Spec.Ingress, networkingv1.NetworkPolicyIngressRule{Ports: r.ports(), From: r.peers()})
	}
	for range r.rng.IntN(3) {
		np.Spec.Egress = append(np.Spec.Egress, networkingv1.NetworkPolicyEgressRule{Ports: r.ports(), To: r.peers()})
	}
	return np
}

func (r *randomCluster) peers() []networkingv1.NetworkPolicyPeer {
	var peers []networkingv1.NetworkPolicyPeer
	for range r.rng.IntN(3) {
		switch r.rng.IntN(4) {
		case 0:
			peers = append(peers, podPeer(r.selector("app=web", "app=db", "tier=fe")))
		case 1:
			peers = append(peers, nsPeer(r.selector("team=red", "team=blue", "env=prod")))
		case 2:
			peers = append(peers, bothPeer(r.selector("team=red", "env=dev"), r.selector("app=web", "tier=be")))
		default:
			peers = append(peers, blockPeer(r.pick("10.0.0.0/28", "10.0.0.0/24", "fd00::/120", "0.0.0.0/0"), r.pick("10.0.0.4/30", "10.0.0.8/32")))
		}
	}
	return peers
}

func (r *randomCluster) ports() []networkingv1.NetworkPolicyPort {
	var out []networkingv1.NetworkPolicyPort
	for range r.rng.IntN(3) {
		out = append(out, port(r.pick("tcp/80", "udp/53", "http", "udp/dns", "tcp/8000-8080", "sctp", "tcp/http")))
	}
	return out
}
