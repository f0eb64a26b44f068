package egressip

import (
	"context"
	"fmt"
	"net/netip"
	"sync"
	"time"

	log "github.com/sirupsen/logrus"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"github.com/kovs-net/kovs/go-controller/pkg/egress"
	"github.com/kovs-net/kovs/go-controller/pkg/runner"
)

// Options configure the controller.
type Options struct {
	// ClusterCIDRs are the pod ranges (an egress IP must be outside them).
	ClusterCIDRs []netip.Prefix
	// LeaseNamespace holds the agents' heartbeat Leases.
	LeaseNamespace string
	// CheckInterval is how often health is checked when nothing happens (default 250 ms):
	// a Lease expiring is no event, so this bounds how late a failure is noticed.
	CheckInterval time.Duration
}

// Controller assigns Egresses to nodes.
type Controller struct {
	opts     Options
	client   dynamic.NamespaceableResourceInterface
	egresses cache.SharedIndexInformer
	nodes    cache.SharedIndexInformer
	leases   cache.SharedIndexInformer
	runner   *runner.BoundedFrequencyRunner

	mu sync.Mutex
	// seen is, per node, the heartbeat Lease's last renew time and when this controller
	// saw it change: expiry is judged on the local clock, never the agent's.
	seen map[string]heartbeat
}

type heartbeat struct {
	renew    time.Time
	seenAt   time.Time
	duration time.Duration
	cidrs    []netip.Prefix
}

// New builds the controller on informers it starts in Run.
func New(client dynamic.Interface, kube kubernetes.Interface, opts Options) *Controller {
	if opts.CheckInterval == 0 {
		opts.CheckInterval = 250 * time.Millisecond
	}
	df := dynamicinformer.NewDynamicSharedInformerFactory(client, 0)
	kf := informers.NewSharedInformerFactory(kube, 0)
	lf := informers.NewSharedInformerFactoryWithOptions(kube, 0, informers.WithNamespace(opts.LeaseNamespace),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = egress.HeartbeatLabel + "=true" }))
	c := &Controller{opts: opts, client: client.Resource(egress.Resource),
		egresses: df.ForResource(egress.Resource).Informer(), nodes: kf.Core().V1().Nodes().Informer(),
		leases: lf.Coordination().V1().Leases().Informer(), seen: map[string]heartbeat{}}
	c.runner = runner.MustNewBoundedFrequencyRunner("egress assignment", c.sync,
		runner.Bounds{MinInterval: 20 * time.Millisecond, MaxInterval: opts.CheckInterval, Burst: 2})
	kick := cache.ResourceEventHandlerFuncs{AddFunc: func(any) { c.runner.Run() },
		UpdateFunc: func(any, any) { c.runner.Run() }, DeleteFunc: func(any) { c.runner.Run() }}
	_, _ = c.egresses.AddEventHandler(kick)
	_, _ = c.nodes.AddEventHandler(kick)
	_, _ = c.leases.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(o any) { c.observe(o) },
		UpdateFunc: func(_, o any) { c.observe(o) },
		DeleteFunc: func(any) { c.runner.Run() },
	})
	return c
}

// Run assigns until ctx ends.
func (c *Controller) Run(ctx context.Context) error {
	for _, inf := range []cache.SharedIndexInformer{c.egresses, c.nodes, c.leases} {
		go inf.Run(ctx.Done())
	}
	if !cache.WaitForCacheSync(ctx.Done(), c.egresses.HasSynced, c.nodes.HasSynced, c.leases.HasSynced) {
		return fmt.Errorf("egress informers did not sync")
	}
	log.Info("assigning Egress IPs")
	c.runner.Loop(ctx)
	return nil
}

// observe records a heartbeat when its renew time changed.
func (c *Controller) observe(obj any) {
	l, ok := obj.(*coordinationv1.Lease)
	if !ok || l.Spec.RenewTime == nil || l.Spec.LeaseDurationSeconds == nil {
		return
	}
	node := l.Labels[egress.HeartbeatNodeLabel]
	c.mu.Lock()
	hb := c.seen[node]
	if !hb.renew.Equal(l.Spec.RenewTime.Time) {
		hb.renew, hb.seenAt = l.Spec.RenewTime.Time, time.Now()
	}
	hb.duration = time.Duration(*l.Spec.LeaseDurationSeconds) * time.Second
	hb.cidrs = egress.ParseCIDRs(l.Annotations[egress.HeartbeatCIDRsAnnotation])
	c.seen[node] = hb
	c.mu.Unlock()
	c.runner.Run()
}

// sync assigns every Egress and writes the statuses that changed.
func (c *Controller) sync() {
	var all []*egress.Egress
	for _, o := range c.egresses.GetStore().List() {
		if e, err := egress.FromUnstructured(o.(*unstructured.Unstructured)); err == nil {
			all = append(all, e)
		}
	}
	if len(all) == 0 {
		return
	}
	decisions := Assign(all, c.nodeInfos(time.Now()), c.opts.ClusterCIDRs)
	byName := map[string]*egress.Egress{}
	for _, e := range all {
		byName[e.Name] = e
	}
	for _, d := range decisions {
		if err := c.write(byName[d.Name], d); err != nil {
			log.WithError(err).WithField("egress", d.Name).Warn("egress status")
			c.runner.Run()
		}
	}
}

// nodeInfos is every Node with its health: Ready, and its heartbeat seen changing within
// the Lease's duration.
func (c *Controller) nodeInfos(now time.Time) []Node {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []Node
	for _, o := range c.nodes.GetStore().List() {
		n := o.(*corev1.Node)
		hb, beat := c.seen[n.Name]
		info := Node{Name: n.Name, Labels: n.Labels, CIDRs: hb.cidrs,
			Healthy: beat && now.Before(hb.seenAt.Add(hb.duration)) && ready(n)}
		for _, a := range n.Status.Addresses {
			if ip, err := netip.ParseAddr(a.Address); err == nil {
				info.Addresses = append(info.Addresses, ip)
			}
		}
		out = append(out, info)
	}
	return out
}

func ready(n *corev1.Node) bool {
	for _, cond := range n.Status.Conditions {
		if cond.Type == corev1.NodeReady {
			return cond.Status == corev1.ConditionTrue
		}
	}
	return false
}

// write updates the status when the decision changes it.
func (c *Controller) write(e *egress.Egress, d Decision) error {
	st := egress.Status{Node: d.Status.Node, ID: d.Status.ID, Conditions: e.Status.Conditions}
	cond := metav1.Condition{Type: egress.ConditionAssigned, Status: metav1.ConditionFalse, Reason: d.Reason,
		Message: d.Message, ObservedGeneration: e.Generation}
	if d.Assigned {
		cond.Status = metav1.ConditionTrue
	}
	meta.SetStatusCondition(&st.Conditions, cond)
	if st.Node == e.Status.Node && st.ID == e.Status.ID && conditionsEqual(st.Conditions, e.Status.Conditions) {
		return nil
	}
	updated := *e
	updated.Status = st
	u, err := updated.ToUnstructured()
	if err != nil {
		return err
	}
	if _, err := c.client.UpdateStatus(context.Background(), u, metav1.UpdateOptions{}); err != nil {
		return err
	}
	log.WithField("egress", e.Name).WithField("node", st.Node).WithField("id", st.ID).WithField("from", e.Status.Node).
		WithField("reason", d.Reason).Info("egress assigned")
	return nil
}

func conditionsEqual(a, b []metav1.Condition) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		x, y := a[i], b[i]
		if x.Type != y.Type || x.Status != y.Status || x.Reason != y.Reason || x.Message != y.Message || x.ObservedGeneration != y.ObservedGeneration {
			return false
		}
	}
	return true
}
