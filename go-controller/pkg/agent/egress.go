package agent

import (
	"context"
	"maps"
	"net/netip"
	"slices"
	"sync/atomic"
	"time"

	log "github.com/sirupsen/logrus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"

	"github.com/kovs-net/kovs/go-controller/pkg/egress"
	"github.com/kovs-net/kovs/go-controller/pkg/pipeline"
	"github.com/kovs-net/kovs/go-controller/pkg/runner"
)

// egressAgent is the node's side of Egress: which local pods an Egress selects and who
// holds it (into NodeState, for the egress stage's flows), the egress IPs this node
// holds (egressHost) and the heartbeat that says it may hold them.
type egressAgent struct {
	a          *Agent
	egresses   cache.SharedIndexInformer
	namespaces cache.SharedIndexInformer
	runner     *runner.BoundedFrequencyRunner
	host       *egressHost
	heartbeat  *egressHeartbeat
	ctx        context.Context
	cleaned    bool // the stale egress routes of an earlier agent are gone
	synced     atomic.Bool
}

// kick asks for a sync (the peers or the nodes' addresses changed).
func (e *egressAgent) kick() {
	if e.synced.Load() {
		e.runner.Run()
	}
}

// startEgress follows the Egresses once the API serves them (dist/egress.yaml), until
// ctx ends. pods is the informer of the node's pods.
func (a *Agent) startEgress(ctx context.Context, pods cache.SharedIndexInformer) {
	if a.cfg.Dynamic == nil {
		return
	}
	e := &egressAgent{a: a, ctx: ctx, host: &egressHost{gateway: a.cfg.GatewayName, held: map[netip.Addr]string{}},
		heartbeat: &egressHeartbeat{a: a, interval: a.cfg.EgressHeartbeatInterval}}
	e.runner = runner.MustNewBoundedFrequencyRunner("egress", e.sync,
		runner.Bounds{MinInterval: 20 * time.Millisecond, MaxInterval: 30 * time.Second, Burst: 2})
	a.egress = e
	go func() {
		for !egressServed(a) {
			select {
			case <-ctx.Done():
				return
			case <-time.After(10 * time.Second):
			}
		}
		df := dynamicinformer.NewDynamicSharedInformerFactory(a.cfg.Dynamic, 0)
		e.egresses = df.ForResource(egress.Resource).Informer()
		e.namespaces = informers.NewSharedInformerFactory(a.client, 0).Core().V1().Namespaces().Informer()
		kick := cache.ResourceEventHandlerFuncs{AddFunc: func(any) { e.runner.Run() },
			UpdateFunc: func(any, any) { e.runner.Run() }, DeleteFunc: func(any) { e.runner.Run() }}
		for _, inf := range []cache.SharedIndexInformer{e.egresses, e.namespaces, pods} {
			_, _ = inf.AddEventHandler(kick)
		}
		go e.egresses.Run(ctx.Done())
		go e.namespaces.Run(ctx.Done())
		if !cache.WaitForCacheSync(ctx.Done(), e.egresses.HasSynced, e.namespaces.HasSynced) {
			return
		}
		log.WithField("node", a.cfg.NodeName).Info("following Egresses")
		e.synced.Store(true)
		go e.heartbeat.run(ctx)
		e.runner.Loop(ctx)
	}()
}

// egressServed reports whether the API serves the Egress resource.
func egressServed(a *Agent) bool {
	list, err := a.client.Discovery().ServerResourcesForGroupVersion(egress.Resource.GroupVersion().String())
	if err != nil {
		return false
	}
	return slices.ContainsFunc(list.APIResources, func(r metav1.APIResource) bool { return r.Name == egress.Resource.Resource })
}

// sync recomputes the node's share, releases the IPs it no longer holds, installs the new
// flows and then takes the IPs it newly holds.
func (e *egressAgent) sync() {
	all := e.list()
	self, err := e.a.nodes.Get(e.a.cfg.NodeName)
	if err != nil {
		return
	}
	e.heartbeat.wanted.Store(slices.ContainsFunc(all, func(x *egress.Egress) bool { return x.Spec.AllowsNode(self.Labels) }))
	share, held := e.share(all)
	for ip := range e.host.held {
		if !held[ip] {
			e.host.release(ip)
		}
	}
	gen := e.a.state.SetEgress(share)
	var acquire []netip.Addr
	for _, ip := range slices.SortedFunc(maps.Keys(held), netip.Addr.Compare) {
		if _, ok := e.host.held[ip]; !ok || !e.host.intact(ip) {
			acquire = append(acquire, ip)
		}
	}
	if len(acquire) == 0 {
		return
	}
	// The translation first, then the route and the neighbour answers: nothing the
	// holder admits leaves untranslated.
	wait, cancel := context.WithTimeout(e.ctx, 10*time.Second)
	defer cancel()
	if err := e.a.syncer.WaitFor(wait, gen); err != nil {
		log.WithError(err).Warn("egress flows not installed yet: retrying")
		e.runner.Run()
		return
	}
	for _, ip := range acquire {
		if err := e.host.acquire(ip); err != nil {
			log.WithError(err).WithField("egress-ip", ip).Error("take the egress IP")
			e.runner.Run()
		}
	}
}

func (e *egressAgent) list() []*egress.Egress {
	var all []*egress.Egress
	for _, o := range e.egresses.GetStore().List() {
		if x, err := egress.FromUnstructured(o.(*unstructured.Unstructured)); err == nil && x.Spec.Validate() == nil {
			all = append(all, x)
		}
	}
	return all
}

// share is the node's Egress share and the egress IPs it holds (of its families).
func (e *egressAgent) share(all []*egress.Egress) (*egressShare, map[netip.Addr]bool) {
	held, known := map[netip.Addr]bool{}, map[netip.Addr]bool{}
	defer e.cleanOnce(held, known)
	for _, x := range all {
		ips, _ := x.Spec.IPs(e.a.cfg.ClusterCIDRs)
		for _, ip := range ips {
			known[ip] = true
		}
	}
	if len(all) == 0 {
		return nil, held
	}
	me := e.a.cfg.NodeName
	node, _ := e.a.nodes.Get(me)
	families := podFamilies(node)
	s := &egressShare{pods: map[string]egressPodRule{}}
	for _, x := range all {
		ips, err := x.Spec.IPs(e.a.cfg.ClusterCIDRs)
		if err != nil || x.Status.Node != me || x.Status.ID == 0 {
			continue
		}
		h := pipeline.HeldEgress{ID: x.Status.ID}
		for _, ip := range ips {
			if families[ip.Is6()] {
				h.IPs = append(h.IPs, ip)
				held[ip] = true
			}
		}
		s.held = append(s.held, h)
	}
	nsLabels := map[string]map[string]string{}
	for _, o := range e.namespaces.GetStore().List() {
		ns := o.(*corev1.Namespace)
		nsLabels[ns.Name] = ns.Labels
	}
	pods, _ := e.a.pods.List(labels.Everything())
	for _, p := range pods {
		if p.Spec.HostNetwork {
			continue
		}
		x := egress.Chosen(all, nsLabels[p.Namespace], p.Labels)
		if x == nil {
			continue
		}
		ips, err := x.Spec.IPs(e.a.cfg.ClusterCIDRs)
		if err != nil {
			continue
		}
		rule := egressPodRule{ID: x.Status.ID, Local: x.Status.Node == me && x.Status.ID != 0, Holder: x.Status.Node}
		for _, ip := range ips {
			if !slices.Contains(rule.Families, ip.Is6()) {
				rule.Families = append(rule.Families, ip.Is6())
			}
		}
		s.pods[p.Namespace+"/"+p.Name] = rule
	}
	for _, a := range e.a.allNodeAddresses() {
		s.exclude = append(s.exclude, netip.PrefixFrom(a, a.BitLen()))
	}
	s.exclude = append(s.exclude, e.a.cfg.NoMasqueradeCIDRs...)
	return s, held
}

// cleanOnce removes, on the first sync, what an earlier agent held and this one does not.
func (e *egressAgent) cleanOnce(held, known map[netip.Addr]bool) {
	if !e.cleaned {
		e.host.cleanStale(held, known)
		e.cleaned = true
	}
}
