package stream

import (
	"context"
	"strings"
	"sync"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
)

// Leader says which kovs-controller replica leads: the holder identity of the replicas'
// Lease ("" while unknown), and a channel closed at its next change.
type Leader interface {
	Leader() (identity string, changed <-chan struct{})
}

// LeaseLeader follows the holder of one Lease. Its zero value knows no leader; set moves
// it.
type LeaseLeader struct {
	mu      sync.Mutex
	holder  string
	changed chan struct{}
}

// Leader implements Leader.
func (l *LeaseLeader) Leader() (string, <-chan struct{}) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.changed == nil {
		l.changed = make(chan struct{})
	}
	return l.holder, l.changed
}

// Pod is the pod of the leading replica: the part of its identity before the first "_"
// (kovs-controller's identities are <pod>_<uuid>, and a pod's name has no "_"); "" while
// no leader is known.
func (l *LeaseLeader) Pod() string {
	id, _ := l.Leader()
	pod, _, _ := strings.Cut(id, "_")
	return pod
}

// set records the Lease's holder, and wakes the waiters when it changed.
func (l *LeaseLeader) set(holder string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if holder == l.holder {
		return
	}
	l.holder = holder
	if l.changed != nil {
		close(l.changed)
	}
	l.changed = make(chan struct{})
}

// FollowLease follows the holder of the Lease namespace/name until ctx ends (an informer
// on that one Lease: a metadata.name field selector, which RBAC can grant by name).
func FollowLease(ctx context.Context, client kubernetes.Interface, namespace, name string) (*LeaseLeader, error) {
	l := &LeaseLeader{}
	factory := informers.NewSharedInformerFactoryWithOptions(client, 0, informers.WithNamespace(namespace),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.FieldSelector = fields.OneTermEqualSelector("metadata.name", name).String()
		}))
	record := func(obj any) {
		if lease, ok := obj.(*coordinationv1.Lease); ok && lease.Spec.HolderIdentity != nil {
			l.set(*lease.Spec.HolderIdentity)
			return
		}
		l.set("")
	}
	if _, err := factory.Coordination().V1().Leases().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    record,
		UpdateFunc: func(_, obj any) { record(obj) },
		DeleteFunc: func(any) { l.set("") },
	}); err != nil {
		return nil, err
	}
	factory.Start(ctx.Done())
	return l, nil
}
