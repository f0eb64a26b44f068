// Package receipts keeps, behind kovs-controller's --debug-receipts flag, when its
// informers received each of the last object versions: a bounded ring per kind of (kind,
// namespace/name, resourceVersion, deleted, received at) served as JSON at
// /debug/receipts on the metrics listener; and, as the kind PolicyStreamWrite, when each
// generation of a node's share was written to the node's policy stream. The scale harness pulls it after a run to
// start kovs's own clock of a change at kovs-controller's receipt rather than before the
// write (docs/scale.md): on one machine, the harness's realized times and these share a
// clock.
package receipts

import (
	"encoding/json"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"
)

// Path is where the ring is served on the metrics listener.
const Path = "/debug/receipts"

// Receipt is one object version as an informer handed it to kovs-controller.
type Receipt struct {
	Kind            string    `json:"kind"`
	Namespace       string    `json:"namespace,omitempty"`
	Name            string    `json:"name"`
	ResourceVersion string    `json:"resourceVersion,omitempty"`
	Deleted         bool      `json:"deleted,omitempty"`
	At              time.Time `json:"at"`
}

// Dump is what Path serves: the receipts oldest first, and how many older ones of each
// kind the rings overwrote (a reader that misses a receipt can tell overflow from loss).
type Dump struct {
	Receipts    []Receipt         `json:"receipts"`
	Overwritten map[string]uint64 `json:"overwritten,omitempty"`
}

// Ring keeps the last receipts of each kind, at most its size per kind, so that a kind
// with many versions (Pods under churn) does not push out another's (NetworkPolicies);
// safe for concurrent use.
type Ring struct {
	mu    sync.Mutex
	size  int
	kinds map[string]*kindRing
	now   func() time.Time
}

// kindRing is one kind's receipts.
type kindRing struct {
	buf         []Receipt
	next        int
	full        bool
	overwritten uint64
}

// NewRing keeps the last size receipts of each kind (size >= 1).
func NewRing(size int) *Ring {
	return &Ring{size: max(size, 1), kinds: map[string]*kindRing{}, now: time.Now}
}

// SentKind is the kind of the receipts RecordSent keeps: Name is the node, ResourceVersion
// the generation of its share written to its policy stream.
const SentKind = "PolicyStreamWrite"

// RecordSent notes that a generation of node's share was written to its policy stream
// now: the end of kovs-controller's part of a change, where the agent's begins.
func (r *Ring) RecordSent(node string, generation uint64) {
	r.add(Receipt{Kind: SentKind, Name: node, ResourceVersion: strconv.FormatUint(generation, 10)})
}

// Record notes that an informer handed over obj's version now.
func (r *Ring) Record(kind string, obj metav1.Object, deleted bool) {
	rec := Receipt{Kind: kind, Namespace: obj.GetNamespace(), Name: obj.GetName(), ResourceVersion: obj.GetResourceVersion(), Deleted: deleted}
	r.add(rec)
}

func (r *Ring) add(rec Receipt) {
	r.mu.Lock()
	defer r.mu.Unlock()
	rec.At = r.now()
	k := r.kinds[rec.Kind]
	if k == nil {
		k = &kindRing{buf: make([]Receipt, r.size)}
		r.kinds[rec.Kind] = k
	}
	if k.full {
		k.overwritten++
	}
	k.buf[k.next] = rec
	k.next = (k.next + 1) % len(k.buf)
	if k.next == 0 {
		k.full = true
	}
}

// Dump copies the rings, every kind's receipts together, oldest first.
func (r *Ring) Dump() Dump {
	r.mu.Lock()
	defer r.mu.Unlock()
	var d Dump
	for kind, k := range r.kinds {
		if k.full {
			d.Receipts = append(d.Receipts, k.buf[k.next:]...)
		}
		d.Receipts = append(d.Receipts, k.buf[:k.next]...)
		if k.overwritten > 0 {
			if d.Overwritten == nil {
				d.Overwritten = map[string]uint64{}
			}
			d.Overwritten[kind] = k.overwritten
		}
	}
	slices.SortStableFunc(d.Receipts, func(a, b Receipt) int { return a.At.Compare(b.At) })
	return d
}

// Handler records every version an informer of kind delivers: additions, updates that
// change the resourceVersion (a resync's does not), deletions (a tombstone's under its
// key: the informer learned of the deletion late, and that is its receipt).
func (r *Ring) Handler(kind string) cache.ResourceEventHandler {
	return cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) {
			if o, ok := obj.(metav1.Object); ok {
				r.Record(kind, o, false)
			}
		},
		UpdateFunc: func(oldObj, obj any) {
			o, ok := obj.(metav1.Object)
			if old, okOld := oldObj.(metav1.Object); ok && (!okOld || old.GetResourceVersion() != o.GetResourceVersion()) {
				r.Record(kind, o, false)
			}
		},
		DeleteFunc: func(obj any) {
			if o, ok := obj.(metav1.Object); ok {
				r.Record(kind, o, true)
				return
			}
			if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				ns, name, err := cache.SplitMetaNamespaceKey(tomb.Key)
				if err == nil {
					r.add(Receipt{Kind: kind, Namespace: ns, Name: name, Deleted: true})
				}
			}
		},
	}
}

// ServeHTTP serves the Dump as JSON.
func (r *Ring) ServeHTTP(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(r.Dump())
}
