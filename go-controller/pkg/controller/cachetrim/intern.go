package cachetrim

import (
	"slices"
	"strconv"
	"sync"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// DefaultInternedSets bounds the label sets a Trimmer remembers: 16,384 sets, with their
// keys and the maps they keep alive (those of deleted objects too, until the table is
// cleared), take at most about 7 MiB for sets of a few labels. A cluster with more
// distinct sets than that still gets every one right, only shared less (see labelSets).
const DefaultInternedSets = 1 << 14

// Trimmer is the transform of the controller's shared informer factory: Transform's trim,
// and then one map shared by every cached Pod with the same labels and every
// NetworkPolicy selector with the same matchLabels. The replicas of a workload carry the
// same labels, and the policies of a namespace template the same selectors: each would
// otherwise hold its own copy of the same map (a small Go map is about 340 bytes, as
// much as the rest of a trimmed pod's strings), in the cache and in the policy
// compiler's model, which keeps the cache's label maps. Namespaces' and Nodes' labels are
// left alone: each carries its own name (kubernetes.io/metadata.name,
// kubernetes.io/hostname), so no two share a set.
//
// A shared map is safe because nothing may modify an object of an informer's cache (the
// client-go contract every reader of it already keeps: a writer copies first).
// A Trimmer is safe for concurrent use by the factory's informers.
type Trimmer struct {
	labels *labelSets
}

// NewTrimmer returns a Trimmer that remembers up to maxSets label sets (<= 0:
// DefaultInternedSets).
func NewTrimmer(maxSets int) *Trimmer {
	if maxSets <= 0 {
		maxSets = DefaultInternedSets
	}
	return &Trimmer{labels: &labelSets{max: maxSets, sets: map[string]map[string]string{}}}
}

// Transform trims obj as the package's Transform does, then shares its label maps with
// the equal ones of objects already transformed. It is idempotent.
func (t *Trimmer) Transform(obj any) (any, error) {
	obj, err := Transform(obj)
	if err != nil {
		return obj, err
	}
	switch o := obj.(type) {
	case *corev1.Pod:
		o.Labels = t.labels.intern(o.Labels)
	case *networkingv1.NetworkPolicy:
		t.internSelector(&o.Spec.PodSelector)
		for i := range o.Spec.Ingress {
			t.internPeers(o.Spec.Ingress[i].From)
		}
		for i := range o.Spec.Egress {
			t.internPeers(o.Spec.Egress[i].To)
		}
	}
	return obj, nil
}

func (t *Trimmer) internPeers(peers []networkingv1.NetworkPolicyPeer) {
	for i := range peers {
		t.internSelector(peers[i].PodSelector)
		t.internSelector(peers[i].NamespaceSelector)
	}
}

func (t *Trimmer) internSelector(s *metav1.LabelSelector) {
	if s != nil {
		s.MatchLabels = t.labels.intern(s.MatchLabels)
	}
}

// labelSets maps the canonical encoding of a label set to the one map of it that the
// cache shares. It remembers at most max sets: when full it forgets them all and starts
// again (the maps already shared stay shared and correct; later equal sets share a new
// one), so it never holds more than max keys whatever the cluster's churn.
type labelSets struct {
	mu   sync.Mutex
	max  int
	sets map[string]map[string]string
	// buf and keys are scratch space for the encoding, used under mu.
	buf  []byte
	keys []string
}

// intern returns the remembered map equal to m, or remembers m and returns it. An empty
// or nil m is returned as it is.
func (s *labelSets) intern(m map[string]string) map[string]string {
	if len(m) == 0 {
		return m
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.encode(m)
	if shared, ok := s.sets[string(s.buf)]; ok {
		return shared
	}
	if len(s.sets) >= s.max {
		clear(s.sets)
	}
	s.sets[string(s.buf)] = m
	return m
}

// encode writes m's canonical encoding into s.buf: its keys sorted, each key and value
// prefixed by its length, so that no two different sets encode alike.
func (s *labelSets) encode(m map[string]string) {
	s.keys = s.keys[:0]
	for k := range m {
		s.keys = append(s.keys, k)
	}
	slices.Sort(s.keys)
	s.buf = s.buf[:0]
	for _, k := range s.keys {
		v := m[k]
		s.buf = strconv.AppendInt(s.buf, int64(len(k)), 10)
		s.buf = append(s.buf, ':')
		s.buf = append(s.buf, k...)
		s.buf = strconv.AppendInt(s.buf, int64(len(v)), 10)
		s.buf = append(s.buf, ':')
		s.buf = append(s.buf, v...)
	}
}
