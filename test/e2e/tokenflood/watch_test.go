package tokenflood_test

import (
	"context"
	"maps"
	"slices"
	"sync"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
)

// The controller's leader election Lease (kovs-controller's defaults, which the sandbox
// keeps).
const (
	leaseNamespace = "kube-system"
	leaseName      = "kovs-controller"
)

// renewal is one version of the Lease seen.
type renewal struct {
	holder   string
	renew    time.Time
	duration time.Duration
}

// leaseWatch records every renewal of the controller's Lease.
type leaseWatch struct {
	mu       sync.Mutex
	renewals []renewal
}

func watchLease(tb testing.TB, client kubernetes.Interface) *leaseWatch {
	tb.Helper()
	w := &leaseWatch{}
	factory := informers.NewSharedInformerFactoryWithOptions(client, 0, informers.WithNamespace(leaseNamespace),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.FieldSelector = fields.OneTermEqualSelector("metadata.name", leaseName).String()
		}))
	informer := factory.Coordination().V1().Leases().Informer()
	record := func(obj any) {
		l, ok := obj.(*coordinationv1.Lease)
		if !ok || l.Spec.RenewTime == nil {
			return
		}
		r := renewal{renew: l.Spec.RenewTime.Time}
		if l.Spec.HolderIdentity != nil {
			r.holder = *l.Spec.HolderIdentity
		}
		if l.Spec.LeaseDurationSeconds != nil {
			r.duration = time.Duration(*l.Spec.LeaseDurationSeconds) * time.Second
		}
		w.mu.Lock()
		defer w.mu.Unlock()
		if n := len(w.renewals); n == 0 || w.renewals[n-1] != r {
			w.renewals = append(w.renewals, r)
		}
	}
	watchAddsAndUpdates(tb, factory, informer, record)
	return w
}

// leaseWindow is what the Lease did in a window of time.
type leaseWindow struct {
	// gap is the longest time without a renewal in the window (counted from the last
	// renewal before it, and up to its end).
	gap      time.Duration
	renewals int
	// holders are the holders seen up to the window's end, in order, each once.
	holders  []string
	duration time.Duration
}

func (w *leaseWatch) window(from, to time.Time) leaseWindow {
	w.mu.Lock()
	defer w.mu.Unlock()
	var lw leaseWindow
	last := from
	for _, r := range w.renewals {
		if r.renew.After(to) {
			break
		}
		if len(lw.holders) == 0 || lw.holders[len(lw.holders)-1] != r.holder {
			lw.holders = append(lw.holders, r.holder)
		}
		lw.duration = r.duration
		if !r.renew.After(from) {
			last = r.renew
			continue
		}
		lw.gap = max(lw.gap, r.renew.Sub(last))
		last = r.renew
		lw.renewals++
	}
	lw.gap = max(lw.gap, to.Sub(last))
	return lw
}

// allocWatch records when each test pod first carries the controller's
// kovs.io/pod-network annotation (its addresses allocated).
type allocWatch struct {
	mu        sync.Mutex
	allocated map[string]time.Time
}

// podLabel marks the pods the test creates.
const podLabel = "kovs-e2e-tokenflood"

func watchAllocations(tb testing.TB, client kubernetes.Interface) *allocWatch {
	tb.Helper()
	w := &allocWatch{allocated: map[string]time.Time{}}
	factory := informers.NewSharedInformerFactoryWithOptions(client, 0,
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = podLabel }))
	informer := factory.Core().V1().Pods().Informer()
	record := func(obj any) {
		p, ok := obj.(*corev1.Pod)
		if !ok || len(p.Status.PodIPs) == 0 {
			return
		}
		now := time.Now()
		w.mu.Lock()
		defer w.mu.Unlock()
		key := p.Namespace + "/" + p.Name
		if _, seen := w.allocated[key]; !seen {
			w.allocated[key] = now
		}
	}
	watchAddsAndUpdates(tb, factory, informer, record)
	return w
}

// latencies returns, for each pod of created (key: its creation time), in the order of
// the keys (the pods' names), the time from its creation to its allocation, and the pods
// not allocated yet.
func (w *allocWatch) latencies(created map[string]time.Time) (lat []time.Duration, missing []string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, key := range slices.Sorted(maps.Keys(created)) {
		done, ok := w.allocated[key]
		if !ok {
			missing = append(missing, key)
			continue
		}
		lat = append(lat, done.Sub(created[key]))
	}
	return lat, missing
}

// watchAddsAndUpdates calls record with every object informer adds or updates, and
// starts factory (stopped when the test ends) and waits until its caches have synced.
func watchAddsAndUpdates(tb testing.TB, factory informers.SharedInformerFactory, informer cache.SharedIndexInformer, record func(obj any)) {
	tb.Helper()
	if _, err := informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    record,
		UpdateFunc: func(_, obj any) { record(obj) },
	}); err != nil {
		tb.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	tb.Cleanup(func() { cancel(); factory.Shutdown() })
	factory.Start(ctx.Done())
	for typ, ok := range factory.WaitForCacheSync(ctx.Done()) {
		if !ok {
			tb.Fatalf("informer of %v did not sync", typ)
		}
	}
}

// percentile is the nearest-rank p-th percentile of sorted (0 when empty).
func percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	rank := int(p/100*float64(len(sorted))+0.999999) - 1
	return sorted[min(max(rank, 0), len(sorted)-1)]
}
