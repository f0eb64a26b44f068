package networkpolicy

import (
	"maps"
	"slices"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"

	"github.com/kovs-net/kovs/go-controller/pkg/policy"
)

// changes records, per object, the latest state the informers delivered since the
// worker last took them (nil: deleted), and signals the worker. Handlers do nothing else.
type changes struct {
	mu         sync.Mutex
	namespaces map[types.NamespacedName]*corev1.Namespace
	pods       map[types.NamespacedName]*corev1.Pod
	policies   map[types.NamespacedName]*networkingv1.NetworkPolicy
	// since is when the first change not yet taken was recorded (zero: none).
	since time.Time
	now   func() time.Time
	// cluster is what the cluster feed's batches not yet taken say together (clusterSet:
	// there is one); clusterExpected, when set, is closed by the first one.
	cluster         policy.ClusterBatch
	clusterSet      bool
	clusterExpected chan struct{}
	// signal asks the worker for a batch (the compiler's runner coalesces the asks).
	signal func()
}

func newChanges(signal func()) *changes {
	c := &changes{signal: signal, now: time.Now}
	c.reset()
	return c
}

func (c *changes) reset() {
	c.namespaces = map[types.NamespacedName]*corev1.Namespace{}
	c.pods = map[types.NamespacedName]*corev1.Pod{}
	c.policies = map[types.NamespacedName]*networkingv1.NetworkPolicy{}
	c.since = time.Time{}
}

// take returns what changed, and when the first of it was recorded (zero: nothing), and
// starts a new record.
func (c *changes) take() (map[types.NamespacedName]*corev1.Namespace, map[types.NamespacedName]*corev1.Pod,
	map[types.NamespacedName]*networkingv1.NetworkPolicy, time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	ns, pods, policies, since := c.namespaces, c.pods, c.policies, c.since
	c.reset()
	return ns, pods, policies, since
}

func (c *changes) notify() { c.signal() }

// object is the type of the objects the compiler watches.
type object interface {
	*corev1.Namespace | *corev1.Pod | *networkingv1.NetworkPolicy
	GetNamespace() string
	GetName() string
}

// handler returns informer handlers that record objects of type T into the map that
// field selects; relevant filters out updates that change nothing the compiler reads.
func handler[T object](c *changes, field func(*changes) map[types.NamespacedName]T, relevant func(old, nu T) bool) cache.ResourceEventHandler {
	record := func(key types.NamespacedName, obj T) {
		c.mu.Lock()
		field(c)[key] = obj
		if c.since.IsZero() {
			c.since = c.now()
		}
		c.mu.Unlock()
		c.notify()
	}
	var none T
	return cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) {
			if o, ok := obj.(T); ok {
				record(objectKey(o), o)
			}
		},
		UpdateFunc: func(oldObj, obj any) {
			old, _ := oldObj.(T)
			if o, ok := obj.(T); ok && (old == none || relevant(old, o)) {
				record(objectKey(o), o)
			}
		},
		DeleteFunc: func(obj any) {
			if o, ok := obj.(T); ok {
				record(objectKey(o), none)
				return
			}
			if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				if ns, name, err := cache.SplitMetaNamespaceKey(tomb.Key); err == nil {
					record(types.NamespacedName{Namespace: ns, Name: name}, none)
				}
			}
		},
	}
}

func objectKey[T object](o T) types.NamespacedName {
	return types.NamespacedName{Namespace: o.GetNamespace(), Name: o.GetName()}
}

// podChanged reports whether a pod update changes what policy compiles from: identity,
// labels, node, addresses, host networking or being terminated (container ports cannot
// change).
func podChanged(old, nu *corev1.Pod) bool {
	return old.UID != nu.UID || !maps.Equal(old.Labels, nu.Labels) || old.Spec.NodeName != nu.Spec.NodeName ||
		old.Spec.HostNetwork != nu.Spec.HostNetwork || selectable(old) != selectable(nu) ||
		old.Status.PodIP != nu.Status.PodIP || !slices.Equal(old.Status.PodIPs, nu.Status.PodIPs)
}

func namespaceChanged(old, nu *corev1.Namespace) bool {
	return !maps.Equal(old.Labels, nu.Labels)
}

func policyChanged(old, nu *networkingv1.NetworkPolicy) bool {
	return old.UID != nu.UID || !equality.Semantic.DeepEqual(old.Spec, nu.Spec)
}
