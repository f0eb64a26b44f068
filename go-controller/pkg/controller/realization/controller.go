package realization

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"time"

	log "github.com/sirupsen/logrus"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	networkinglisters "k8s.io/client-go/listers/networking/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"

	"github.com/kovs-net/kovs/go-controller/pkg/policy"
	"github.com/kovs-net/kovs/go-controller/pkg/policy/stream"
	"github.com/kovs-net/kovs/go-controller/pkg/reconcile"
)

// Options tune a Controller.
type Options struct {
	// MinWriteInterval spaces the writes of an incomplete status of one policy (default
	// 1 s); a complete status is written at once.
	MinWriteInterval time.Duration
	// Settle delays the look at a policy after a share change (default 50 ms), so that
	// the deltas of one compiler batch have reached every node's record: a node whose
	// delta is still on its way would count as realized at the previous version.
	Settle time.Duration
	// StartupGrace is how long after start an incomplete status does not replace a
	// complete annotation (default 15 s): the agents, which kept enforcing, reconnect and
	// report meanwhile, and a restart is not shown as a loss of enforcement.
	StartupGrace time.Duration
	Workers      int
	// Metrics, if set, instrument the controller's work queue.
	Metrics *reconcile.Metrics
}

// Controller keeps the realization status of every NetworkPolicy.
type Controller struct {
	opts     Options
	client   kubernetes.Interface
	recorder record.EventRecorder
	policies networkinglisters.NetworkPolicyLister
	pods     corelisters.PodLister
	// podIndex is the Pod informer's indexer, with podLabelsIndex.
	podIndex cache.Indexer
	// selectors finds the policies that select a pod.
	selectors *policySelectors
	tracker   *Tracker
	ctl       *reconcile.Controller

	started time.Time

	mu       sync.Mutex
	statuses map[types.NamespacedName]Status
	// views are what the last computation of each policy's status found per node, so
	// that a report needs a look at the node that reported only (statusView).
	views   map[types.NamespacedName]*statusView
	written map[types.NamespacedName]time.Time
	// incomplete are the policies this controller saw not realized: their completion is
	// news (an Event).
	incomplete map[types.NamespacedName]bool
}

// New builds the controller on the factory's NetworkPolicy and Pod informers; call it
// before starting the factory.
func New(factory informers.SharedInformerFactory, client kubernetes.Interface, recorder record.EventRecorder, opts Options) (*Controller, error) {
	if opts.MinWriteInterval <= 0 {
		opts.MinWriteInterval = time.Second
	}
	if opts.Settle <= 0 {
		opts.Settle = 50 * time.Millisecond
	}
	if opts.StartupGrace <= 0 {
		opts.StartupGrace = 15 * time.Second
	}
	policies, pods := factory.Networking().V1().NetworkPolicies(), factory.Core().V1().Pods()
	if err := pods.Informer().AddIndexers(cache.Indexers{podLabelsIndex: podLabelPairs}); err != nil {
		return nil, err
	}
	c := &Controller{opts: opts, client: client, recorder: recorder, policies: policies.Lister(), pods: pods.Lister(),
		podIndex: pods.Informer().GetIndexer(), started: time.Now(), statuses: map[types.NamespacedName]Status{},
		written: map[types.NamespacedName]time.Time{}, incomplete: map[types.NamespacedName]bool{}, selectors: newPolicySelectors(),
		views: map[types.NamespacedName]*statusView{}}
	c.tracker = NewTracker(c.shareChanged)
	c.ctl = reconcile.New(reconcile.Options{Name: "policy-realization", Workers: opts.Workers, Metrics: opts.Metrics}, c,
		policies.Informer().HasSynced, pods.Informer().HasSynced)
	if _, err := policies.Informer().AddEventHandler(c.selectors.handler()); err != nil {
		return nil, err
	}
	if _, err := policies.Informer().AddEventHandler(c.ctl.Handler()); err != nil {
		return nil, err
	}
	if _, err := pods.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj interface{}) { c.podChanged(nil, obj) },
		UpdateFunc: func(old, obj interface{}) {
			if o, n := asPod(old), asPod(obj); o == nil || n == nil || podMoved(o, n) {
				c.podChanged(old, obj)
			}
		},
		DeleteFunc: func(obj interface{}) { c.podChanged(nil, obj) },
	}); err != nil {
		return nil, err
	}
	return c, nil
}

// Reports is where the policy stream server hands the agents' realized generations.
func (c *Controller) Reports() stream.Reports { return c.tracker }

// Tracker is what follows the nodes' shares and reports (ClusterNetworkPolicies ask it
// too: cluster.go).
func (c *Controller) Tracker() *Tracker { return c.tracker }

// Run follows every node's share from src and keeps the statuses until ctx ends.
func (c *Controller) Run(ctx context.Context, src stream.Source, nodes cache.SharedIndexInformer) error {
	errc := make(chan error, 1)
	go func() { errc <- c.tracker.Run(ctx, src, nodes) }()
	err := c.ctl.Run(ctx)
	if terr := <-errc; err == nil {
		err = terr
	}
	return err
}

// Summary returns every policy's status, for metrics.
func (c *Controller) Summary() Summary {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := Summary{Policies: make(map[string]Status, len(c.statuses))}
	for key, st := range c.statuses {
		s.Policies[key.String()] = st
		if st.Complete() {
			s.Complete++
		} else {
			s.Incomplete++
		}
	}
	return s
}

// Reconcile computes a policy's status and records it on the policy.
func (c *Controller) Reconcile(ctx context.Context, k string) error {
	ns, name, err := cache.SplitMetaNamespaceKey(k)
	if err != nil {
		return nil
	}
	key := types.NamespacedName{Namespace: ns, Name: name}
	np, err := c.policies.NetworkPolicies(ns).Get(name)
	if apierrors.IsNotFound(err) {
		c.tracker.forgetPolicy(key)
		c.mu.Lock()
		delete(c.statuses, key)
		delete(c.views, key)
		delete(c.written, key)
		delete(c.incomplete, key)
		c.mu.Unlock()
		return nil
	}
	if err != nil {
		return err
	}
	st, err := c.status(np)
	if err != nil {
		return err
	}
	c.mu.Lock()
	c.statuses[key] = st
	c.mu.Unlock()
	old, oldErr := ParseStatus(np.Annotations[AnnotationKey])
	if !st.Complete() && oldErr == nil && old.Complete() {
		if wait := c.opts.StartupGrace - time.Since(c.started); wait > 0 {
			c.ctl.EnqueueAfter(k, wait)
			return nil
		}
	}
	c.mu.Lock()
	last := c.written[key]
	if !st.Complete() {
		c.incomplete[key] = true
	}
	// News: the first complete status, one after an incomplete one, or the first on some
	// node (a policy written before its pods were known first concerns none, and may
	// then be realized on its nodes before any incomplete status is seen).
	news := oldErr != nil || !old.Complete() || old.Concerned == 0 || c.incomplete[key]
	c.mu.Unlock()
	if oldErr == nil && old == st {
		return nil
	}
	if wait := c.opts.MinWriteInterval - time.Since(last); !st.Complete() && wait > 0 {
		c.ctl.EnqueueAfter(k, wait)
		return nil
	}
	if err := c.annotate(ctx, np, st); err != nil {
		return err
	}
	c.mu.Lock()
	c.written[key] = time.Now()
	if st.Complete() {
		delete(c.incomplete, key)
	}
	c.mu.Unlock()
	if st.Complete() && st.Concerned > 0 && news {
		c.recorder.Eventf(np, corev1.EventTypeNormal, ReasonRealized, "enforced on %d/%d nodes at generation %d",
			st.Realized, st.Concerned, st.Generation)
		log.WithField("policy", k).WithField("nodes", st.Concerned).WithField("generation", st.Generation).Info("policy realized")
	}
	return nil
}

// statusView is what the last computation of a policy's status found: what the policy
// expects on each node it concerns, and which of them enforce it. A node's report makes
// only that node's verdict stale (reported), so a policy over n nodes, realized as their
// reports come in, costs O(1) per report rather than O(n) (BenchmarkReportStatusGrowth);
// a share or pod change that can change a verdict makes the whole view stale, and so
// does a new version of the policy (its resourceVersion differs from the view's): the
// next computation starts over. Guarded by the
// controller's mu; the work queue gives a policy's key to one worker at a time.
type statusView struct {
	version  string // the policy's resourceVersion the expectations are of
	exp      map[string]*onNode
	done     map[string]bool
	st       Status
	stale    bool
	reported map[string]struct{}
}

// status tells how far the policy is enforced: from its view, asking the tracker again
// about the nodes that reported since, or about every node it concerns when the view is
// stale.
func (c *Controller) status(np *networkingv1.NetworkPolicy) (Status, error) {
	key := types.NamespacedName{Namespace: np.Namespace, Name: np.Name}
	c.mu.Lock()
	v := c.views[key]
	if v == nil || v.stale || v.version != np.ResourceVersion {
		if v == nil {
			v = &statusView{}
			c.views[key] = v
		}
		v.stale, v.reported = false, nil
		c.mu.Unlock()
		return c.wholeStatus(np, v)
	}
	reported := v.reported
	v.reported = nil
	st := v.st
	c.mu.Unlock()
	for node := range reported {
		on, ok := v.exp[node]
		if !ok || v.done[node] {
			continue
		}
		done, need := c.tracker.verdict(node, *on)
		if done {
			v.done[node] = true
			st.Realized++
		}
		st.Generation = max(st.Generation, need)
	}
	c.mu.Lock()
	v.st = st
	c.mu.Unlock()
	return st, nil
}

// wholeStatus asks the tracker about every node the policy concerns, and keeps what it
// found in v.
func (c *Controller) wholeStatus(np *networkingv1.NetworkPolicy, v *statusView) (Status, error) {
	exp, err := expectations(np, c.podIndex)
	if err != nil {
		c.mu.Lock()
		v.stale = true
		c.mu.Unlock()
		return Status{}, err
	}
	st := Status{Concerned: len(exp)}
	done := make(map[string]bool, len(exp))
	for node, on := range exp {
		ok, need := c.tracker.verdict(node, *on)
		if ok {
			st.Realized++
			done[node] = true
		}
		st.Generation = max(st.Generation, need)
	}
	c.mu.Lock()
	v.version, v.exp, v.done, v.st = np.ResourceVersion, exp, done, st
	c.mu.Unlock()
	return st, nil
}

// stale makes the next computation of the policies' statuses start over.
func (c *Controller) stale(keys ...types.NamespacedName) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, k := range keys {
		if v := c.views[k]; v != nil {
			v.stale = true
		}
	}
}

// reportedBy makes the next computation of the policies' statuses ask about node again.
func (c *Controller) reportedBy(node string, keys []types.NamespacedName) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, k := range keys {
		if v := c.views[k]; v != nil {
			if v.reported == nil {
				v.reported = map[string]struct{}{}
			}
			v.reported[node] = struct{}{}
		}
	}
}

func (c *Controller) annotate(ctx context.Context, np *networkingv1.NetworkPolicy, st Status) error {
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{AnnotationKey: st.String()}}})
	if err != nil {
		return err
	}
	_, err = c.client.NetworkingV1().NetworkPolicies(np.Namespace).Patch(ctx, np.Name, types.MergePatchType, patch, metav1.PatchOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("annotate NetworkPolicy %s/%s: %w", np.Namespace, np.Name, err)
	}
	return nil
}

// shareChanged enqueues the policies a change of a node's share, or a report, concerns.
// After a share change their views are stale, and they wait for the other nodes' deltas
// to settle (Settle); after a report, they are looked at again at once, asking about the
// node that reported only.
func (c *Controller) shareChanged(keys []types.NamespacedName, pods []policy.PodKey, reported string) {
	if reported != "" {
		c.reportedBy(reported, keys)
		for _, k := range keys {
			c.ctl.Enqueue(k.String())
		}
		return
	}
	c.stale(keys...)
	for _, k := range keys {
		c.ctl.EnqueueAfter(k.String(), c.opts.Settle)
	}
	for _, p := range pods {
		pod, err := c.pods.Pods(p.Namespace).Get(p.Name)
		if err != nil {
			continue // gone: its deletion enqueued the policies that selected it
		}
		for _, k := range c.selecting(pod.Namespace, pod.Labels) {
			c.staleKey(k)
			c.ctl.EnqueueAfter(k, c.opts.Settle)
		}
	}
}

// staleKey is stale for a work queue key (namespace/name).
func (c *Controller) staleKey(k string) {
	if ns, name, err := cache.SplitMetaNamespaceKey(k); err == nil {
		c.stale(types.NamespacedName{Namespace: ns, Name: name})
	}
}

// podChanged enqueues the policies that select the pod before or after a change.
func (c *Controller) podChanged(old, obj interface{}) {
	if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = tomb.Obj
	}
	for _, o := range []interface{}{old, obj} {
		if p := asPod(o); p != nil {
			c.enqueueSelecting(p.Namespace, p.Labels)
		}
	}
}

func (c *Controller) enqueueSelecting(namespace string, podLabels map[string]string) {
	for _, k := range c.selecting(namespace, podLabels) {
		c.staleKey(k)
		c.ctl.Enqueue(k)
	}
}

// selecting returns the keys of the policies of the namespace that select such pods.
func (c *Controller) selecting(namespace string, podLabels map[string]string) []string {
	return c.selectors.selecting(namespace, podLabels)
}

func asPod(obj interface{}) *corev1.Pod {
	p, _ := obj.(*corev1.Pod)
	return p
}

// podMoved reports whether an update changes which policies concern the pod's node.
func podMoved(old, nu *corev1.Pod) bool {
	return old.Spec.NodeName != nu.Spec.NodeName || selectable(old) != selectable(nu) || old.UID != nu.UID ||
		!labels.Equals(old.Labels, nu.Labels)
}
