package clusterpolicy

import (
	"context"
	"fmt"
	"strings"
	"time"

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
	// ConditionProgrammed is True (reason ReasonRealized) when the policy's current
	// version is enforced in br-int on every node with pods it selects, False (reason
	// ReasonPending) while it is on its way; the message counts the nodes.
	ConditionProgrammed = "kovs.io/Programmed"

	ReasonAsWritten         = "AsWritten"
	ReasonPartlyUnsupported = "PartlyUnsupported"
	ReasonRealized          = "Realized"
	ReasonPending           = "Pending"
)

// Realizations tell on how many of the nodes a policy has rules on (concerned) the
// agent enforces them (realized): realization.Tracker.
type Realizations interface {
	ClusterRealization(name string) (realized, concerned int)
}

// Status writes the status conditions of every ClusterNetworkPolicy and an Event when a
// policy holds something kovs cannot enforce as written.
type Status struct {
	client   versioned.Interface
	recorder record.EventRecorder
	factory  externalversions.SharedInformerFactory
	lister   listers.ClusterNetworkPolicyLister
	ctl      *reconcile.Controller
	// realizations and compiled (the Feed's Compiled) say how far a policy is programmed;
	// nil: never.
	realizations Realizations
	compiled     func(name string) (int64, bool)
}

// NewStatus builds the status controller on its own informer (started by Run). The
// Programmed condition is True once feed has compiled the policy's current version and
// realizations count it enforced on every node it has rules on; Enqueue asks for another
// look (the Feed after a batch, the tracker after a report).
func NewStatus(client versioned.Interface, recorder record.EventRecorder, metrics *reconcile.Metrics, realizations Realizations,
	compiled func(name string) (int64, bool)) (*Status, error) {
	s := &Status{client: client, recorder: recorder, factory: externalversions.NewSharedInformerFactory(client, 0),
		realizations: realizations, compiled: compiled}
	informer := s.factory.Policy().V1beta1().ClusterNetworkPolicies()
	s.lister = informer.Lister()
	s.ctl = reconcile.New(reconcile.Options{Name: "cluster-network-policy-status", Workers: 1, Metrics: metrics}, s, informer.Informer().HasSynced)
	if _, err := informer.Informer().AddEventHandler(s.ctl.Handler()); err != nil {
		return nil, err
	}
	return s, nil
}

// Enqueue asks for another look at the policies.
func (s *Status) Enqueue(names []string) {
	for _, n := range names {
		s.ctl.Enqueue(n)
	}
}

// settle is how long after a batch of the feed its policies get another look: the NetworkPolicy
// compiler's batch that carries the rules to the shares, and the tracker's record of
// them, come after the feed hands them over (realization.Options.Settle's reason).
const settle = 100 * time.Millisecond

// EnqueueSettled asks for another look at the policies once settle has passed.
func (s *Status) EnqueueSettled(names []string) {
	for _, n := range names {
		s.ctl.EnqueueAfter(n, settle)
	}
}

// programmed is the policy's Programmed condition.
func (s *Status) programmed(cnp *v1beta1.ClusterNetworkPolicy) metav1.Condition {
	c := metav1.Condition{Type: ConditionProgrammed, Status: metav1.ConditionFalse, Reason: ReasonPending, ObservedGeneration: cnp.Generation}
	if s.compiled == nil || s.realizations == nil {
		c.Message = "kovs-controller does not program ClusterNetworkPolicies (no NetworkPolicy stream)"
		return c
	}
	if gen, ok := s.compiled(cnp.Name); !ok || gen < cnp.Generation {
		c.Message = "not compiled yet"
		return c
	}
	realized, concerned := s.realizations.ClusterRealization(cnp.Name)
	switch {
	case concerned == 0:
		c.Status, c.Reason, c.Message = metav1.ConditionTrue, ReasonRealized, "selects no pod: nothing to enforce"
	case realized == concerned:
		c.Status, c.Reason, c.Message = metav1.ConditionTrue, ReasonRealized, fmt.Sprintf("enforced on %d/%d nodes", realized, concerned)
	default:
		c.Message = fmt.Sprintf("enforced on %d/%d nodes", realized, concerned)
	}
	return c
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
	programmed := s.programmed(cnp)
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
