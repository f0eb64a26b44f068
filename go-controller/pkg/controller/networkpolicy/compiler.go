package networkpolicy

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	log "github.com/sirupsen/logrus"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"

	"github.com/kovs-net/kovs/go-controller/pkg/policy"
	"github.com/kovs-net/kovs/go-controller/pkg/runner"
)

// ErrStopped is returned by Watch once the compiler has stopped.
var ErrStopped = errors.New("policy compiler stopped")

// Options tune a Compiler.
type Options struct {
	// MinSyncInterval is the least time between two batches: changes that arrive in the
	// meantime are compiled together. Zero compiles as soon as the worker is free.
	MinSyncInterval time.Duration
	// Observe, if set, is told of every batch after its subscribers were woken (metrics).
	Observe func(Batch)
}

// Batch is what one compile batch did and how long it took.
type Batch struct {
	// Waited is from the first change of the batch reaching the compiler (its informer
	// handler) to the batch starting; Took is the batch itself, up to the subscribers
	// concerned being woken (their deltas are computed on their own goroutines).
	Waited, Took               time.Duration
	Namespaces, Pods, Policies int
	Subscribers                int
}

// Compiler is the NetworkPolicy compiler of kovs-controller: it watches Namespaces, Pods
// and NetworkPolicies and keeps every node's share of the normalized policy up to date,
// for the nodes' subscribers. Informer handlers only record changes; one worker compiles
// them in batches.
type Compiler struct {
	opts    Options
	changes *changes
	// batches runs sync: at once for the first change, then at most once per
	// MinSyncInterval.
	batches *runner.BoundedFrequencyRunner
	synced  []cache.InformerSynced
	ready   chan struct{}
	stopped chan struct{}

	mu    sync.RWMutex // guards model; only the worker writes it, in batches
	model *model
}

// New builds a compiler on the factory's Namespace, Pod and NetworkPolicy informers. Call
// it before starting the factory; then Run the compiler.
func New(factory informers.SharedInformerFactory, opts Options) (*Compiler, error) {
	c := &Compiler{opts: opts, ready: make(chan struct{}), stopped: make(chan struct{}), model: newModel()}
	batches, err := runner.NewBoundedFrequencyRunner("policy compiler", c.sync, runner.Bounds{MinInterval: opts.MinSyncInterval, Burst: 1})
	if err != nil {
		return nil, fmt.Errorf("policy compiler: min sync interval: %w", err)
	}
	c.batches, c.changes = batches, newChanges(batches.Run)
	handlers := []struct {
		informer cache.SharedIndexInformer
		handler  cache.ResourceEventHandler
	}{
		{factory.Core().V1().Namespaces().Informer(), handler(c.changes,
			func(c *changes) map[types.NamespacedName]*corev1.Namespace { return c.namespaces }, namespaceChanged)},
		{factory.Core().V1().Pods().Informer(), handler(c.changes,
			func(c *changes) map[types.NamespacedName]*corev1.Pod { return c.pods }, podChanged)},
		{factory.Networking().V1().NetworkPolicies().Informer(), handler(c.changes,
			func(c *changes) map[types.NamespacedName]*networkingv1.NetworkPolicy { return c.policies }, policyChanged)},
	}
	for _, h := range handlers {
		reg, err := h.informer.AddEventHandler(h.handler)
		if err != nil {
			return nil, fmt.Errorf("register policy compiler handler: %w", err)
		}
		c.synced = append(c.synced, reg.HasSynced)
	}
	return c, nil
}

// isReady tells whether the initial compile is done (the first batch, of everything the
// informers listed, is no change's latency).
func (c *Compiler) isReady() bool {
	select {
	case <-c.ready:
		return true
	default:
		return false
	}
}

// Ready is closed once the compiler has compiled everything the informers listed at
// start: every node's share is then complete.
func (c *Compiler) Ready() <-chan struct{} { return c.ready }

// Run compiles until ctx ends. Nothing is compiled before every informer has delivered
// its initial list, so that no share is ever sent from a partial view.
func (c *Compiler) Run(ctx context.Context) error {
	defer close(c.stopped)
	if !cache.WaitForCacheSync(ctx.Done(), c.synced...) {
		return fmt.Errorf("policy compiler: caches did not sync")
	}
	select {
	case <-c.changes.clusterRulesArrived():
	case <-ctx.Done():
		return nil
	}
	start := time.Now()
	c.sync()
	close(c.ready)
	c.logStats(time.Since(start))
	c.batches.Loop(ctx)
	return nil
}

// sync compiles one batch of changes and wakes the subscribers it concerns.
func (c *Compiler) sync() {
	namespaces, pods, policies, since := c.changes.take()
	start := time.Now()
	c.mu.Lock()
	for key, ns := range namespaces {
		c.model.setNamespace(key.Name, ns)
	}
	for key, p := range pods {
		c.model.setPod(key, p)
	}
	for key, np := range policies {
		c.model.setPolicy(key, np)
	}
	if b, ok := c.changes.takeCluster(); ok {
		c.model.setClusterRules(b)
	}
	notify := c.model.commit()
	generation := c.model.generation
	c.mu.Unlock()
	for _, s := range notify {
		s.wake()
	}
	if c.opts.Observe != nil && !since.IsZero() && c.isReady() {
		c.opts.Observe(Batch{Waited: start.Sub(since), Took: time.Since(start), Namespaces: len(namespaces), Pods: len(pods),
			Policies: len(policies), Subscribers: len(notify)})
	}
	log.WithField("generation", generation).WithField("namespaces", len(namespaces)).WithField("pods", len(pods)).
		WithField("policies", len(policies)).WithField("subscribers", len(notify)).Debug("policy batch compiled")
}

func (c *Compiler) logStats(took time.Duration) {
	st := c.Stats()
	log.WithField("took", took).WithField("pods", st.Pods).WithField("policies", st.Policies).
		WithField("groups", st.Groups).WithField("addressSets", st.AddressSets).WithField("rules", st.Rules).
		WithField("nodes", st.Nodes).Info("network policies compiled")
}

// Stats counts what the compiler holds, for metrics and logs.
func (c *Compiler) Stats() Stats {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.model.stats()
}

// Generation returns the current generation of the shares.
func (c *Compiler) Generation() uint64 {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.model.generation
}

// Watch subscribes to one node's share: it returns the share now and a channel of the
// deltas that follow it, each from the generation of the previous one. Deltas coalesce
// while the receiver is busy, so a slow receiver never holds up the compiler. The channel
// is closed after cancel is called or when the compiler stops. Watch waits until the
// compiler is Ready. The share's maps and lists may be shared with the compiler: Clone
// it before changing it (before applying deltas to it).
func (c *Compiler) Watch(ctx context.Context, node string) (policy.NodeShare, <-chan policy.Delta, func(), error) {
	select {
	case <-c.stopped:
		return policy.NodeShare{}, nil, nil, ErrStopped
	default:
	}
	select {
	case <-c.ready:
	case <-c.stopped:
		return policy.NodeShare{}, nil, nil, ErrStopped
	case <-ctx.Done():
		return policy.NodeShare{}, nil, nil, fmt.Errorf("watch the policy of node %s: %w", node, ctx.Err())
	}
	out := make(chan policy.Delta)
	done := make(chan struct{})
	dctx, cancel := context.WithCancel(context.Background())
	var s *subscriber
	// One delivery at a time: batches that come while the receiver is busy coalesce into
	// the next delta.
	deliveries := runner.MustNewBoundedFrequencyRunner("policy deltas to node "+node, func() { c.deliver(dctx, s, out) },
		runner.Bounds{Burst: 1})
	c.mu.Lock()
	s, share := c.model.subscribe(node)
	s.wake = deliveries.Run
	c.mu.Unlock()
	go func() {
		select {
		case <-done:
		case <-c.stopped:
		}
		cancel()
	}()
	go c.serve(dctx, s, deliveries, out)
	var once sync.Once
	return share, out, func() { once.Do(func() { close(done) }) }, nil
}

// serve sends s its deltas until ctx ends (cancel, or the compiler stopped).
func (c *Compiler) serve(ctx context.Context, s *subscriber, deliveries *runner.BoundedFrequencyRunner, out chan<- policy.Delta) {
	defer func() {
		c.mu.Lock()
		c.model.unsubscribe(s)
		c.mu.Unlock()
		close(out)
	}()
	deliveries.Loop(ctx)
}

// deliver sends s the delta of what is pending for it, if anything, waiting for the
// receiver to take it or for ctx to end.
func (c *Compiler) deliver(ctx context.Context, s *subscriber, out chan<- policy.Delta) {
	c.mu.RLock()
	d, ok := c.model.delta(s)
	c.mu.RUnlock()
	if !ok {
		return
	}
	select {
	case out <- d:
	case <-ctx.Done():
	}
}
