package agent

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	log "github.com/sirupsen/logrus"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	discoverylisters "k8s.io/client-go/listers/discovery/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/kovs-net/kovs/go-controller/pkg/pipeline"
	"github.com/kovs-net/kovs/go-controller/pkg/runner"
)

// Service proxy modes (--service-proxy).
const (
	ServiceProxyKovs = "kovs" // br-int load-balances Services
	ServiceProxyNone = "none" // Services are left to kube-proxy on the host
)

// ServiceProxy turns Services and EndpointSlices into the node's Service ports. Event
// handlers only record which Service changed and signal; one goroutine recomputes those
// Services and hands them to the desired state, whose flow sync rewrites only their flows
// and groups. Nothing reaches the state before both informers have synced.
type ServiceProxy struct {
	node     string
	state    *NodeState
	services corelisters.ServiceLister
	slices   discoverylisters.EndpointSliceLister
	synced   []cache.InformerSynced
	// onChange, if set, is called with the Services after each change was handed to the
	// state (the host networking follows them), and every hostResync with full set
	// (repairing drift).
	onChange func(all map[string][]pipeline.ServicePort, full bool)
	// sctp: load-balance SCTP ports too (the kernel datapath; the userspace datapath's
	// conntrack cannot NAT SCTP).
	sctp bool
	// health, if set, follows every change from its event to the switch (the proxy
	// health URLs).
	health *proxyHealth
	// checks, if set, serves the health check node ports of the Services in checks'
	// keys (externalTrafficPolicy Local LoadBalancers), after each change.
	checks      *healthCheckServer
	healthCheck map[string]healthCheck

	mu      sync.Mutex
	changed map[string]bool // Service keys (namespace/name) to recompute
	// zone is this node's topology.kubernetes.io/zone label; rezone: it changed, so every
	// Service is to be recomputed (their topology hints may now choose other endpoints).
	zone    string
	rezone  bool
	runner  *runner.BoundedFrequencyRunner
	ids     *groupAllocator
	current map[string][]pipeline.ServicePort
	// hostSynced is when onChange last ran with full set (only the runner touches it).
	hostSynced time.Time
}

// hostResync is how often the host networking of Services is rewritten whether or not
// anything changed, which repairs drift (a flushed ruleset, a deleted route).
const hostResync = 30 * time.Second

// NewServiceProxy registers the Service and EndpointSlice informers on factory.
func NewServiceProxy(node string, state *NodeState, factory informers.SharedInformerFactory) (*ServiceProxy, error) {
	svcInformer := factory.Core().V1().Services()
	sliceInformer := factory.Discovery().V1().EndpointSlices()
	p := &ServiceProxy{node: node, state: state, services: svcInformer.Lister(), slices: sliceInformer.Lister(),
		synced:  []cache.InformerSynced{svcInformer.Informer().HasSynced, sliceInformer.Informer().HasSynced},
		changed: map[string]bool{}, ids: newGroupAllocator(), current: map[string][]pipeline.ServicePort{},
		healthCheck: map[string]healthCheck{}}
	// Changes are handed over as soon as they come (coalesced while a run is busy); the
	// host networking is rewritten every hostResync whether or not anything changed.
	p.runner = runner.MustNewBoundedFrequencyRunner("service proxy", p.sync, runner.Bounds{MaxInterval: hostResync, Burst: 1})
	svcHandler := cache.ResourceEventHandlerFuncs{
		AddFunc:    func(o interface{}) { p.recordService(o) },
		UpdateFunc: func(_, o interface{}) { p.recordService(o) },
		DeleteFunc: func(o interface{}) { p.recordService(o) },
	}
	sliceHandler := cache.ResourceEventHandlerFuncs{
		AddFunc:    func(o interface{}) { p.recordSlice(o) },
		UpdateFunc: func(_, o interface{}) { p.recordSlice(o) },
		DeleteFunc: func(o interface{}) { p.recordSlice(o) },
	}
	if _, err := svcInformer.Informer().AddEventHandler(svcHandler); err != nil {
		return nil, err
	}
	if _, err := sliceInformer.Informer().AddEventHandler(sliceHandler); err != nil {
		return nil, err
	}
	return p, nil
}

// LabelServiceProxyName on a Service names the proxy that serves it; kovs, like
// kube-proxy, leaves every Service that carries it (whatever the name) to that proxy.
const LabelServiceProxyName = "service.kubernetes.io/service-proxy-name"

// serviceProxySelector selects what kube-proxy selects: Services and EndpointSlices
// without LabelServiceProxyName (another proxy serves them) and without
// service.kubernetes.io/headless (they are not load-balanced by the node; the
// EndpointSlice controller copies a Service's labels to its slices). A Service that gains
// either label leaves the informers as if deleted, and comes back when it loses it.
func serviceProxySelector() string {
	sel := labels.NewSelector()
	for _, key := range []string{LabelServiceProxyName, corev1.IsHeadlessService} {
		req, err := labels.NewRequirement(key, selection.DoesNotExist, nil)
		if err != nil {
			panic(fmt.Sprintf("label requirement !%s: %v", key, err)) // constant keys: a programming error
		}
		sel = sel.Add(*req)
	}
	return sel.String()
}

// newServiceInformers is the informer factory of the Service proxy: Services and
// EndpointSlices of serviceProxySelector only.
func newServiceInformers(client kubernetes.Interface) informers.SharedInformerFactory {
	sel := serviceProxySelector()
	return informers.NewSharedInformerFactoryWithOptions(client, 0, informers.WithTweakListOptions(func(o *metav1.ListOptions) {
		o.LabelSelector = sel
	}))
}

func (p *ServiceProxy) recordService(o interface{}) {
	if key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(o); err == nil {
		p.record(key)
	}
}

func (p *ServiceProxy) recordSlice(o interface{}) {
	if d, ok := o.(cache.DeletedFinalStateUnknown); ok {
		o = d.Obj
	}
	s, ok := o.(*discoveryv1.EndpointSlice)
	if !ok {
		return
	}
	if name := s.Labels[discoveryv1.LabelServiceName]; name != "" {
		p.record(s.Namespace + "/" + name)
	}
}

func (p *ServiceProxy) record(key string) {
	p.mu.Lock()
	p.changed[key] = true
	if p.health != nil {
		p.health.queued()
	}
	p.mu.Unlock()
	p.runner.Run()
}

// Start waits (up to wait) for both informers to sync and installs every Service in the
// state in one change, then follows changes until ctx ends.
func (p *ServiceProxy) Start(ctx context.Context, wait time.Duration) error {
	syncCtx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	if !cache.WaitForCacheSync(syncCtx.Done(), p.synced...) {
		return fmt.Errorf("service and endpointslice informers did not sync within %s", wait)
	}
	p.mu.Lock()
	p.changed = map[string]bool{}
	p.rezone = false
	self := proxyNode{name: p.node, zone: p.zone}
	since := p.takeQueued()
	p.mu.Unlock()
	svcs, err := p.services.List(labels.Everything())
	if err != nil {
		return err
	}
	for _, svc := range svcs {
		key := svc.Namespace + "/" + svc.Name
		if ports := p.compute(key, self); len(ports) > 0 {
			p.current[key] = ports
		}
	}
	gen := p.state.SetServices(p.current)
	p.notify(true)
	p.syncHealthChecks()
	p.handedTo(since, gen)
	p.hostSynced = time.Now()
	log.WithField("node", p.node).WithField("services", len(p.current)).Info("service proxy synced")
	go p.runner.Loop(ctx)
	return nil
}

// sync is the runner's function: it recomputes the Services that changed and hands them to
// the state, then lets the host networking follow (all of it when hostResync is due).
func (p *ServiceProxy) sync() {
	p.mu.Lock()
	keys := p.changed
	p.changed = map[string]bool{}
	self := proxyNode{name: p.node, zone: p.zone}
	if p.rezone {
		p.rezone = false
		p.allServicesLocked(keys)
	}
	since := p.takeQueued()
	p.mu.Unlock()
	for key := range keys {
		ports := p.compute(key, self)
		if len(ports) == 0 {
			delete(p.current, key)
			p.ids.release(key)
		} else {
			p.current[key] = ports
		}
		p.state.SetService(key, ports)
	}
	full := time.Since(p.hostSynced) >= hostResync
	if full {
		p.hostSynced = time.Now()
	}
	p.notify(full)
	p.syncHealthChecks()
	p.handedTo(since, p.state.Generation())
}

// syncHealthChecks serves the health check node ports of the Services as they are now
// (and retries one that could not be opened before).
func (p *ServiceProxy) syncHealthChecks() {
	if p.checks != nil {
		p.checks.sync(p.healthCheck)
	}
}

// takeQueued is when the oldest of the changes being taken came (zero without health);
// called with mu held.
func (p *ServiceProxy) takeQueued() time.Time {
	if p.health == nil {
		return time.Time{}
	}
	return p.health.take()
}

// handedTo tells the health that the changes that came from since on are in generation
// gen of the state, and in the host networking.
func (p *ServiceProxy) handedTo(since time.Time, gen uint64) {
	if p.health != nil {
		p.health.handedTo(since, gen)
	}
}

func (p *ServiceProxy) notify(full bool) {
	if p.onChange != nil {
		p.onChange(p.current, full)
	}
}

// SetZone tells the proxy this node's topology.kubernetes.io/zone label ("" without it).
// A new zone recomputes every Service, as kube-proxy resyncs when its node's topology
// labels change. Before Start it only sets the zone Start uses.
func (p *ServiceProxy) SetZone(zone string) {
	p.mu.Lock()
	if zone == p.zone {
		p.mu.Unlock()
		return
	}
	log.WithField("node", p.node).WithField("zone", zone).Info("service proxy: node zone changed")
	p.zone, p.rezone = zone, true
	if p.health != nil {
		p.health.queued()
	}
	p.mu.Unlock()
	p.runner.Run()
}

// allServicesLocked adds every Service the proxy serves or knows to keys (mu held).
func (p *ServiceProxy) allServicesLocked(keys map[string]bool) {
	for key := range p.current {
		keys[key] = true
	}
	svcs, err := p.services.List(labels.Everything())
	if err != nil {
		return
	}
	for _, svc := range svcs {
		keys[svc.Namespace+"/"+svc.Name] = true
	}
}

// compute reads one Service and its EndpointSlices from the listers, and notes its
// health check node port (if it has one).
func (p *ServiceProxy) compute(key string, self proxyNode) []pipeline.ServicePort {
	delete(p.healthCheck, key)
	ns, name, err := cache.SplitMetaNamespaceKey(key)
	if err != nil {
		return nil
	}
	svc, err := p.services.Services(ns).Get(name)
	if err != nil {
		return nil
	}
	sel := labels.SelectorFromSet(labels.Set{discoveryv1.LabelServiceName: name})
	list, err := p.slices.EndpointSlices(ns).List(sel)
	if err != nil {
		return nil
	}
	if hc, ok := healthCheckOf(svc, list, p.node); ok {
		p.healthCheck[key] = hc
	}
	ports := servicePorts(svc, list, self, p.ids.forService(key), p.sctp)
	// One Service the datapath cannot take must not keep the node's other flows out.
	return slices.DeleteFunc(ports, func(sp pipeline.ServicePort) bool {
		err := sp.Validate()
		if err != nil {
			log.WithError(err).WithField("service", key).WithField("port", sp.Name).Warn("service port left out")
		}
		return err != nil
	})
}

// groupAllocator gives each Service port group a stable ID for as long as its Service
// exists; IDs of deleted Services are reused.
type groupAllocator struct {
	mu    sync.Mutex
	byKey map[string]uint32
	owner map[string][]string // Service key -> its group keys
	free  []uint32
	next  uint32
}

func newGroupAllocator() *groupAllocator {
	return &groupAllocator{byKey: map[string]uint32{}, owner: map[string][]string{}, next: 1}
}

// forService is the allocator as seen by one Service.
func (a *groupAllocator) forService(svc string) groupIDs { return serviceGroupIDs{a, svc} }

type serviceGroupIDs struct {
	a   *groupAllocator
	svc string
}

func (s serviceGroupIDs) groupID(key string) uint32 {
	a := s.a
	a.mu.Lock()
	defer a.mu.Unlock()
	if id, ok := a.byKey[key]; ok {
		return id
	}
	var n uint32
	if len(a.free) > 0 {
		n, a.free = a.free[0], a.free[1:]
	} else {
		n = a.next
		a.next++
	}
	id := pipeline.ServiceGroupBase | n
	a.byKey[key] = id
	a.owner[s.svc] = append(a.owner[s.svc], key)
	return id
}

// release frees the group IDs of a deleted Service.
func (a *groupAllocator) release(svc string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, key := range a.owner[svc] {
		a.free = append(a.free, a.byKey[key]&^pipeline.ServiceGroupMask)
		delete(a.byKey, key)
	}
	delete(a.owner, svc)
}

// serviceRulesInSync is what the health check node ports say of the proxy: no change has
// waited too long to be installed (always, without the proxy health URLs).
func (p *ServiceProxy) serviceRulesInSync() bool {
	if p.health == nil {
		return true
	}
	ok, _, _ := p.health.healthy()
	return ok
}
