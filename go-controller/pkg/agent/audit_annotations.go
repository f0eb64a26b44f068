package agent

import (
	"context"
	"time"

	log "github.com/sirupsen/logrus"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"

	"github.com/kovs-net/kovs/go-controller/pkg/audit"
	"github.com/kovs-net/kovs/go-controller/pkg/pipeline"
	"github.com/kovs-net/kovs/go-controller/pkg/runner"
)

// clusterNetworkPolicies is the resource whose kovs.io/audit-log annotations the agent
// follows (read as unstructured objects: only their metadata matters here).
var clusterNetworkPolicies = schema.GroupVersionResource{Group: "policy.networking.k8s.io", Version: "v1beta1", Resource: "clusternetworkpolicies"}

// watchAuditAnnotations follows the kovs.io/audit-log annotations of Namespaces and
// ClusterNetworkPolicies and hands what they ask for to the pipeline. A malformed value
// logs nothing for its object (kovs-controller reports it in an Event).
func (a *Agent) watchAuditAnnotations(ctx context.Context) {
	var stores []cache.Store
	r := runner.MustNewBoundedFrequencyRunner("audit annotations", func() {
		a.state.SetAudit(auditSettings(stores...))
	}, runner.Bounds{MinInterval: 100 * time.Millisecond, Burst: 2})
	kick := cache.ResourceEventHandlerFuncs{AddFunc: func(any) { r.Run() },
		UpdateFunc: func(any, any) { r.Run() }, DeleteFunc: func(any) { r.Run() }}
	namespaces := informers.NewSharedInformerFactory(a.client, 0).Core().V1().Namespaces().Informer()
	informers := []cache.SharedIndexInformer{namespaces}
	if a.cfg.Dynamic != nil {
		informers = append(informers, dynamicinformer.NewDynamicSharedInformerFactory(a.cfg.Dynamic, 0).ForResource(clusterNetworkPolicies).Informer())
	}
	for _, inf := range informers {
		_, _ = inf.AddEventHandler(kick)
		stores = append(stores, inf.GetStore())
		go inf.Run(ctx.Done())
	}
	go r.Loop(ctx)
}

// auditSettings are what the annotations of the objects in stores ask to log: a
// Namespace's for its NetworkPolicies, a ClusterNetworkPolicy's for it. nil: nothing.
func auditSettings(stores ...cache.Store) *pipeline.Audit {
	out := &pipeline.Audit{Meter: pipeline.AuditMeterID}
	for _, store := range stores {
		for _, obj := range store.List() {
			m, err := meta.Accessor(obj)
			if err != nil {
				continue
			}
			value, ok := m.GetAnnotations()[audit.Annotation]
			if !ok {
				continue
			}
			_, isNamespace := obj.(*corev1.Namespace)
			accepted := audit.ClusterPolicyVerdicts
			if isNamespace {
				accepted = audit.NamespaceVerdicts
			}
			vs, err := audit.Parse(value, accepted)
			if err != nil {
				log.WithField("object", m.GetName()).WithError(err).Debug("audit annotation ignored")
				continue
			}
			if isNamespace {
				if out.Namespaces == nil {
					out.Namespaces = map[string]audit.Verdicts{}
				}
				out.Namespaces[m.GetName()] = vs
			} else {
				if out.ClusterPolicies == nil {
					out.ClusterPolicies = map[string]audit.Verdicts{}
				}
				out.ClusterPolicies[m.GetName()] = vs
			}
		}
	}
	if out.Namespaces == nil && out.ClusterPolicies == nil {
		return nil
	}
	return out
}
