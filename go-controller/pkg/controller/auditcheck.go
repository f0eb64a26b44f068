package controller

import (
	"sync"

	log "github.com/sirupsen/logrus"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"sigs.k8s.io/network-policy-api/apis/v1beta1"

	"github.com/kovs-net/kovs/go-controller/pkg/audit"
)

// ReasonInvalidAuditAnnotation is the reason of the Warning Event on a Namespace or a
// ClusterNetworkPolicy whose kovs.io/audit-log value is not a list of verdicts: kovs-agent
// logs nothing for the object until it is corrected.
const ReasonInvalidAuditAnnotation = "InvalidAuditAnnotation"

// auditAnnotationWarnings reports malformed kovs.io/audit-log values, once per value: the
// agents, which read the same annotations, ignore them (docs/audit.md).
type auditAnnotationWarnings struct {
	recorder record.EventRecorder
	accepted []audit.Verdict
	mu       sync.Mutex
	warned   map[string]string // object name -> the value warned about
}

// watchAuditAnnotations adds the warnings to an informer of Namespaces or of
// ClusterNetworkPolicies (accepted: what the kind's annotation may name).
func watchAuditAnnotations(informer cache.SharedIndexInformer, recorder record.EventRecorder, accepted []audit.Verdict) error {
	w := &auditAnnotationWarnings{recorder: recorder, accepted: accepted, warned: map[string]string{}}
	_, err := informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    w.check,
		UpdateFunc: func(_, obj any) { w.check(obj) },
		DeleteFunc: func(obj any) {
			if m, err := meta.Accessor(obj); err == nil {
				w.mu.Lock()
				delete(w.warned, m.GetName())
				w.mu.Unlock()
			}
		},
	})
	return err
}

func (w *auditAnnotationWarnings) check(obj any) {
	m, err := meta.Accessor(obj)
	if err != nil {
		return
	}
	value, has := m.GetAnnotations()[audit.Annotation]
	_, parseErr := audit.Parse(value, w.accepted)
	w.mu.Lock()
	defer w.mu.Unlock()
	if !has || parseErr == nil {
		delete(w.warned, m.GetName())
		return
	}
	if prev, ok := w.warned[m.GetName()]; ok && prev == value {
		return
	}
	w.warned[m.GetName()] = value
	ro, ok := obj.(runtime.Object)
	if !ok {
		return
	}
	switch o := ro.(type) {
	case *corev1.Namespace:
		o = o.DeepCopy()
		o.APIVersion, o.Kind = "v1", "Namespace"
		ro = o
	case *v1beta1.ClusterNetworkPolicy:
		o = o.DeepCopy()
		o.APIVersion, o.Kind = v1beta1.GroupVersion.String(), "ClusterNetworkPolicy"
		ro = o
	}
	msg := parseErr.Error() + "; nothing is logged for it until it is corrected"
	w.recorder.Event(ro, corev1.EventTypeWarning, ReasonInvalidAuditAnnotation, msg)
	log.WithField("object", m.GetName()).Warn(msg)
}
