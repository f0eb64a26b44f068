package clusterpolicy

import (
	"context"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"sync"
	"time"

	log "github.com/sirupsen/logrus"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"sigs.k8s.io/network-policy-api/apis/v1beta1"
	"sigs.k8s.io/network-policy-api/pkg/client/clientset/versioned"
	"sigs.k8s.io/network-policy-api/pkg/client/informers/externalversions"
	listers "sigs.k8s.io/network-policy-api/pkg/client/listers/apis/v1beta1"

	"github.com/kovs-net/kovs/go-controller/pkg/policy"
	"github.com/kovs-net/kovs/go-controller/pkg/runner"
)

// Sink takes every node's cluster rules (the NetworkPolicy compiler, which carries them
// in the nodes' shares) and where each pod was when they were compiled: the node of every
// pod the batch evaluated ("" if not scheduled), so that a node's share lists a new pod
// only with the cluster rules that select it.
type Sink interface {
	UpdateClusterRules(policy.ClusterBatch)
}

// Feed compiles the ClusterNetworkPolicies against the cluster (Compile) into every
// node's rules (Rules.NodeRules) and hands them to a Sink, again after every change of a
// policy, pod, namespace or node, in batches at most once per MinInterval. While there is
// a ClusterNetworkPolicy, and in the batch after the last one goes, each batch compiles
// everything afresh: the cost grows with policies times pods (BenchmarkCompile), which
// is the price of this first version. Without any, a batch evaluates only the pods that
// changed since the batch before (a pod's events mark it), so a cluster without
// ClusterNetworkPolicy pays per pod event, not per pod (BenchmarkFeedWithoutPolicies).
// Either way a batch tells the sink only where pods are evaluated anew, and which pods
// it no longer evaluates.
type Feed struct {
	sink       Sink
	factory    externalversions.SharedInformerFactory
	policies   listers.ClusterNetworkPolicyLister
	pods       corelisters.PodLister
	namespaces corelisters.NamespaceLister
	nodes      corelisters.NodeLister
	synced     []cache.InformerSynced
	batches    *runner.BoundedFrequencyRunner
	// compiled is each policy's metadata.generation the last batch compiled; after
	// each batch the feed tells Compiled's readers through onCompiled.
	mu         sync.Mutex
	compiled   map[string]int64
	onCompiled func(names []string)
	// changed are the pods whose events came since the last batch took them.
	changedMu sync.Mutex
	changed   map[types.NamespacedName]bool
	// The batches' state (sync's only): where the batches sent evaluated each pod, by
	// name, and whether the next batch reads the whole cluster (the first, and the one
	// after a batch that had policies).
	evaluated map[types.NamespacedName]evaluation
	readAll   bool
}

// evaluation is where the feed's batches evaluated a pod.
type evaluation struct {
	key  policy.PodKey
	node string
}

// Compiled is the metadata.generation of the policy that the last batch handed to the
// sink; false if none.
func (f *Feed) Compiled(name string) (int64, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	gen, ok := f.compiled[name]
	return gen, ok
}

// OnCompiled sets who is told the policies of each batch (before Run).
func (f *Feed) OnCompiled(tell func(names []string)) { f.onCompiled = tell }

// NewFeed builds the feed on its own ClusterNetworkPolicy informer and on core's Pod,
// Namespace and Node informers (a factory the caller starts).
func NewFeed(client versioned.Interface, core informers.SharedInformerFactory, sink Sink, minInterval time.Duration) (*Feed, error) {
	f := &Feed{sink: sink, factory: externalversions.NewSharedInformerFactory(client, 0),
		changed: map[types.NamespacedName]bool{}, evaluated: map[types.NamespacedName]evaluation{}, readAll: true}
	batches, err := runner.NewBoundedFrequencyRunner("cluster network policy rules", f.sync, runner.Bounds{MinInterval: minInterval, Burst: 1})
	if err != nil {
		return nil, fmt.Errorf("cluster network policy rules: %w", err)
	}
	f.batches = batches
	cnps := f.factory.Policy().V1beta1().ClusterNetworkPolicies()
	f.policies, f.pods, f.namespaces, f.nodes = cnps.Lister(), core.Core().V1().Pods().Lister(),
		core.Core().V1().Namespaces().Lister(), core.Core().V1().Nodes().Lister()
	kick := onRelevant(func(any) { f.batches.Run() })
	for inf, handler := range map[cache.SharedIndexInformer]cache.ResourceEventHandler{cnps.Informer(): kick,
		core.Core().V1().Pods().Informer(): onRelevant(f.podChanged), core.Core().V1().Namespaces().Informer(): kick,
		core.Core().V1().Nodes().Informer(): kick} {
		reg, err := inf.AddEventHandler(handler)
		if err != nil {
			return nil, fmt.Errorf("cluster network policy rules: %w", err)
		}
		f.synced = append(f.synced, reg.HasSynced)
	}
	return f, nil
}

// Run hands the sink the rules compiled from everything the informers listed, then again
// after changes, until ctx ends.
func (f *Feed) Run(ctx context.Context) error {
	f.factory.Start(ctx.Done())
	defer f.factory.Shutdown()
	if !cache.WaitForCacheSync(ctx.Done(), f.synced...) {
		return nil
	}
	f.sync()
	f.batches.Loop(ctx)
	return nil
}

// onRelevant calls changed with the object of every add, delete and update that changes
// what Compile reads (relevantUpdate).
func onRelevant(changed func(obj any)) cache.ResourceEventHandlerFuncs {
	return cache.ResourceEventHandlerFuncs{
		AddFunc: changed,
		UpdateFunc: func(old, nu any) {
			if relevantUpdate(old, nu) {
				changed(nu)
			}
		},
		DeleteFunc: changed,
	}
}

// podChanged marks a pod for the next batch, and asks for one.
func (f *Feed) podChanged(obj any) {
	key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj)
	if err != nil {
		return
	}
	ns, name, err := cache.SplitMetaNamespaceKey(key)
	if err != nil {
		return
	}
	f.changedMu.Lock()
	f.changed[types.NamespacedName{Namespace: ns, Name: name}] = true
	f.changedMu.Unlock()
	f.batches.Run()
}

// takeChanged returns the pods marked since the last take.
func (f *Feed) takeChanged() map[types.NamespacedName]bool {
	f.changedMu.Lock()
	defer f.changedMu.Unlock()
	changed := f.changed
	f.changed = map[types.NamespacedName]bool{}
	return changed
}

func (f *Feed) sync() {
	start := time.Now()
	cnps, err := f.policies.List(labels.Everything())
	if err != nil {
		log.WithError(err).Error("list ClusterNetworkPolicies")
		return
	}
	changed := f.takeChanged()
	var batch policy.ClusterBatch
	var rules Rules
	if f.readAll || len(cnps) > 0 {
		c, evaluated := f.cluster()
		rules = Compile(cnps, c)
		batch = policy.ClusterBatch{Rules: rules.NodeRules(func(k policy.PodKey) string { return evaluated[k] }), HasRules: true}
		batch.Evaluated, batch.Forgotten = f.evaluateAll(evaluated)
	} else {
		batch.Evaluated, batch.Forgotten = f.evaluateChanged(changed)
	}
	f.readAll = len(cnps) > 0
	f.sink.UpdateClusterRules(batch)
	compiled := make(map[string]int64, len(cnps))
	names := make([]string, 0, len(cnps))
	for _, p := range cnps {
		compiled[p.Name] = p.Generation
		names = append(names, p.Name)
	}
	f.mu.Lock()
	f.compiled = compiled
	f.mu.Unlock()
	if f.onCompiled != nil {
		f.onCompiled(names)
	}
	log.WithField("policies", len(cnps)).WithField("rules", len(rules)).WithField("pods", len(batch.Evaluated)).
		WithField("took", time.Since(start)).Debug("cluster network policy rules compiled")
}

// evaluateAll makes evaluated, where a batch that read the whole cluster evaluated every
// pod, the feed's, and returns how it differs from what the batches before said.
func (f *Feed) evaluateAll(evaluated map[policy.PodKey]string) (anew map[policy.PodKey]string, forgotten map[policy.PodKey]bool) {
	anew, forgotten = map[policy.PodKey]string{}, map[policy.PodKey]bool{}
	now := make(map[types.NamespacedName]evaluation, len(evaluated))
	for k, node := range evaluated {
		name := types.NamespacedName{Namespace: k.Namespace, Name: k.Name}
		now[name] = evaluation{key: k, node: node}
		if f.evaluated[name] != now[name] {
			anew[k] = node
		}
	}
	for name, was := range f.evaluated {
		if now[name].key != was.key {
			forgotten[was.key] = true
		}
	}
	f.evaluated = now
	return anew, forgotten
}

// evaluateChanged evaluates the pods marked since the batch before, as the listers have
// them now, and returns where it evaluated those that are new or moved and which pods it
// no longer evaluates.
func (f *Feed) evaluateChanged(changed map[types.NamespacedName]bool) (anew map[policy.PodKey]string, forgotten map[policy.PodKey]bool) {
	anew, forgotten = map[policy.PodKey]string{}, map[policy.PodKey]bool{}
	for name := range changed {
		var pod Pod
		selectable := false
		if p, err := f.pods.Pods(name.Namespace).Get(name.Name); err == nil {
			pod, selectable = PodOf(p)
		}
		was, had := f.evaluated[name]
		if !selectable {
			if had {
				delete(f.evaluated, name)
				forgotten[was.key] = true
			}
			continue
		}
		now := evaluation{key: pod.PodKey, node: pod.Node}
		if had && was.key != now.key {
			forgotten[was.key] = true
		}
		if was != now {
			anew[now.key] = now.node
			f.evaluated[name] = now
		}
	}
	return anew, forgotten
}

// cluster reads the cluster from the listers, and where each of its pods runs ("" for a
// pod not scheduled).
func (f *Feed) cluster() (*Cluster, map[policy.PodKey]string) {
	namespaces, _ := f.namespaces.List(labels.Everything())
	pods, _ := f.pods.List(labels.Everything())
	nodes, _ := f.nodes.List(labels.Everything())
	return NewCluster(namespaces, pods, nodes)
}

// NewCluster is the cluster as Compile reads it from the API's objects (the selectable
// pods, PodOf; the nodes, NodeOf), and where each of its pods runs ("" for a pod not
// scheduled).
func NewCluster(namespaces []*corev1.Namespace, pods []*corev1.Pod, nodes []*corev1.Node) (*Cluster, map[policy.PodKey]string) {
	c := &Cluster{Namespaces: make(map[string]map[string]string, len(namespaces))}
	for _, ns := range namespaces {
		c.Namespaces[ns.Name] = ns.Labels
	}
	where := make(map[policy.PodKey]string, len(pods))
	for _, p := range pods {
		if pod, ok := PodOf(p); ok {
			c.Pods = append(c.Pods, pod)
			where[pod.PodKey] = pod.Node
		}
	}
	for _, n := range nodes {
		c.Nodes = append(c.Nodes, NodeOf(n))
	}
	return c, where
}

// relevantUpdate reports whether an update changes what Compile reads: a policy's spec,
// a pod's identity, labels, node, addresses, named ports or selectability, a namespace's
// labels, a node's labels or addresses. Status churn (conditions, heartbeats) does not
// start a batch.
func relevantUpdate(old, nu any) bool {
	switch o := old.(type) {
	case *corev1.Pod:
		n, ok := nu.(*corev1.Pod)
		if !ok {
			return true
		}
		op, oOK := PodOf(o)
		np, nOK := PodOf(n)
		return oOK != nOK || op.PodKey != np.PodKey || op.Node != np.Node || !maps.Equal(op.Labels, np.Labels) ||
			!slices.Equal(op.IPs, np.IPs) || !slices.Equal(op.Ports, np.Ports)
	case *corev1.Namespace:
		n, ok := nu.(*corev1.Namespace)
		return !ok || !maps.Equal(o.Labels, n.Labels)
	case *corev1.Node:
		n, ok := nu.(*corev1.Node)
		if !ok {
			return true
		}
		on, nn := NodeOf(o), NodeOf(n)
		return !maps.Equal(on.Labels, nn.Labels) || !slices.Equal(on.IPs, nn.IPs)
	case *v1beta1.ClusterNetworkPolicy:
		n, ok := nu.(*v1beta1.ClusterNetworkPolicy)
		return !ok || o.Generation != n.Generation || o.UID != n.UID
	}
	return true
}

// PodOf is the pod as ClusterNetworkPolicy selects it; false for a pod it never selects
// (host-network or terminated).
func PodOf(p *corev1.Pod) (Pod, bool) {
	if p.Spec.HostNetwork || p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
		return Pod{}, false
	}
	pod := Pod{PodKey: policy.PodKey{Namespace: p.Namespace, Name: p.Name, UID: string(p.UID)}, Labels: p.Labels,
		Node: p.Spec.NodeName}
	for _, s := range p.Status.PodIPs {
		if ip, err := netip.ParseAddr(s.IP); err == nil {
			pod.IPs = append(pod.IPs, ip.Unmap())
		}
	}
	for i := range p.Spec.Containers {
		for _, cp := range p.Spec.Containers[i].Ports {
			if cp.Name == "" {
				continue
			}
			proto := policy.Protocol(cp.Protocol)
			if proto == "" {
				proto = policy.TCP
			}
			pod.Ports = append(pod.Ports, NamedPort{Name: cp.Name, Protocol: proto, Number: cp.ContainerPort})
		}
	}
	return pod, true
}

// NodeOf is the node as the nodes peer selects it: its labels and status.addresses.
func NodeOf(n *corev1.Node) Node {
	node := Node{Name: n.Name, Labels: n.Labels}
	for _, a := range n.Status.Addresses {
		if ip, err := netip.ParseAddr(a.Address); err == nil {
			node.IPs = append(node.IPs, ip.Unmap())
		}
	}
	return node
}
