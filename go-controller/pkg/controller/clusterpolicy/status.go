package clusterpolicy

import (
	"context"
	"fmt"
	"strings"

	log "github.com/sirupsen/logrus"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"sigs.k8s.io/network-policy-api/apis/v1beta1"
	"sigs.k8s.io/network-policy-api/pkg/client/clientset/versioned"
	"sigs.k8s.io/network-policy-api/pkg/client/informers/externalversions"
	listers "sigs.k8s.io/network-policy-api/pkg/client/listers/apis/v1beta1"

	"github.com/kovs-net/kovs/go-controller/pkg/reconcile"
)

// The status conditions kovs-controller writes on every ClusterNetworkPolicy. They carry
// the kovs.io/ prefix: the API leaves the conditions to the implementations, and more
// than one may write them.
const (
	// ConditionSupported is True when kovs enforces the policy as written, False (reason
	// ReasonPartlyUnsupported) when Check found something it enforces differently; the
	// message says what and what to fix.
	ConditionSupported = "kovs.io/Supported"
	// ConditionProgrammed is False (reason ReasonNotImplemented): this version of kovs
	// checks ClusterNetworkPolicy but does not program it into br-int yet.
	ConditionProgrammed = "kovs.io/Programmed"

	ReasonAsWritten         = "AsWritten"
	ReasonPartlyUnsupported = "PartlyUnsupported"
	ReasonNotImplemented    = "NotImplemented"
)

// notProgrammed is the message of ConditionProgrammed while the datapath lacks the tiers.
const notProgrammed = "this version of kovs checks ClusterNetworkPolicy but does not program it into br-int: the policy is not enforced on any node (docs/cluster-network-policy.md)"

// Status writes the status conditions of every ClusterNetworkPolicy and an Event when a
// policy holds something kovs cannot enforce as written.
type Status struct {
	client   versioned.Interface
	recorder record.EventRecorder
	factory  externalversions.SharedInformerFactory
	lister   listers.ClusterNetworkPolicyLister
	ctl      *reconcile.Controller
}

// NewStatus builds the status controller on its own informer (started by Run).
func NewStatus(client versioned.Interface, recorder record.EventRecorder, metrics *reconcile.Metrics) (*Status, error) {
	s := &Status{client: client, recorder: recorder, factory: externalversions.NewSharedInformerFactory(client, 0)}
	informer := s.factory.Policy().V1beta1().ClusterNetworkPolicies()
	s.lister = informer.Lister()
	s.ctl = reconcile.New(reconcile.Options{Name: "cluster-network-policy-status", Workers: 1, Metrics: metrics}, s, informer.Informer().HasSynced)
	if _, err := informer.Informer().AddEventHandler(s.ctl.Handler()); err != nil {
		return nil, err
	}
	return s, nil
}

// Run follows the policies until ctx ends.
func (s *Status) Run(ctx context.Context) error {
	s.factory.Start(ctx.Done())
	defer s.factory.Shutdown()
	return s.ctl.Run(ctx)
}

// Reconcile writes one policy's conditions when they differ from what it has.
func (s *Status) Reconcile(ctx context.Context, key string) error {
	_, name, err := cache.SplitMetaNamespaceKey(key)
	if err != nil {
		return nil
	}
	cnp, err := s.lister.Get(name)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	problems := Check(cnp)
	supported := metav1.Condition{Type: ConditionSupported, Status: metav1.ConditionTrue, Reason: ReasonAsWritten,
		Message: "kovs enforces the policy as written", ObservedGeneration: cnp.Generation}
	if len(problems) > 0 {
		supported.Status, supported.Reason = metav1.ConditionFalse, ReasonPartlyUnsupported
		supported.Message = strings.Join(problems, "; ")
	}
	programmed := metav1.Condition{Type: ConditionProgrammed, Status: metav1.ConditionFalse, Reason: ReasonNotImplemented,
		Message: notProgrammed, ObservedGeneration: cnp.Generation}
	updated := cnp.DeepCopy()
	changedSupported := meta.SetStatusCondition(&updated.Status.Conditions, supported)
	changedProgrammed := meta.SetStatusCondition(&updated.Status.Conditions, programmed)
	if !changedSupported && !changedProgrammed {
		return nil
	}
	if _, err := s.client.PolicyV1beta1().ClusterNetworkPolicies().UpdateStatus(ctx, updated, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("status of ClusterNetworkPolicy %s: %w", name, err)
	}
	if changedSupported && len(problems) > 0 {
		ref := cnp.DeepCopy()
		ref.APIVersion, ref.Kind = v1beta1.GroupVersion.String(), "ClusterNetworkPolicy"
		s.recorder.Event(ref, corev1.EventTypeWarning, ReasonPartlyUnsupported, supported.Message)
	}
	log.WithField("clusterNetworkPolicy", name).WithField("supported", supported.Status).Info("ClusterNetworkPolicy status written")
	return nil
}
