package policy

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

	api "github.com/kovs-net/kovs/go-controller/pkg/policy"
)

// ErrStopped is returned by Watch once the compiler has stopped.
var ErrStopped = errors.New("policy compiler stopped")

// Options tune a Compiler.
type Options struct {
	// MinSyncInterval is the least time between two batches: changes that arrive in the
	// meantime are compiled together. Zero compiles as soon as the worker is free.
	MinSyncInterval time.Duration
}

// Compiler is the NetworkPolicy compiler of kovs-controller: it watches Namespaces, Pods
// and NetworkPolicies and keeps every node's share of the normalized policy up to date,
// for the nodes' subscribers. Informer handlers only record changes; one worker compiles
// them in batches.
type Compiler struct {
	opts    Options
	changes *changes
	synced  []cache.InformerSynced
	ready   chan struct{}
	stopped chan struct{}

	mu    sync.RWMutex // guards model; only the worker writes it, in batches
	model *model
}

// New builds a compiler on the factory's Namespace, Pod and NetworkPolicy informers. Call
// it before starting the factory; then Run the compiler.
func New(factory informers.SharedInformerFactory, opts Options) (*Compiler, error) {
	c := &Compiler{opts: opts, changes: newChanges(), ready: make(chan struct{}), stopped: make(chan struct{}), model: newModel()}
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
	start := time.Now()
	c.sync()
	close(c.ready)
	c.logStats(time.Since(start))
	last := time.Now()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-c.changes.signal:
		}
		if wait := c.opts.MinSyncInterval - time.Since(last); wait > 0 {
			select {
			case <-ctx.Done():
				return nil
			case <-time.After(wait):
			}
		}
		last = time.Now()
		c.sync()
	}
}

// sync compiles one batch of changes and wakes the subscribers it concerns.
func (c *Compiler) sync() {
	namespaces, pods, policies := c.changes.take()
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
	notify := c.model.commit()
	generation := c.model.generation
	c.mu.Unlock()
	for _, s := range notify {
		select {
		case s.notify <- struct{}{}:
		default:
		}
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
// compiler is Ready.
func (c *Compiler) Watch(ctx context.Context, node string) (api.NodeShare, <-chan api.Delta, func(), error) {
	select {
	case <-c.stopped:
		return api.NodeShare{}, nil, nil, ErrStopped
	default:
	}
	select {
	case <-c.ready:
	case <-c.stopped:
		return api.NodeShare{}, nil, nil, ErrStopped
	case <-ctx.Done():
		return api.NodeShare{}, nil, nil, fmt.Errorf("watch the policy of node %s: %w", node, ctx.Err())
	}
	c.mu.Lock()
	s, share := c.model.subscribe(node)
	c.mu.Unlock()
	out := make(chan api.Delta)
	done := make(chan struct{})
	var once sync.Once
	go c.serve(s, out, done)
	return share, out, func() { once.Do(func() { close(done) }) }, nil
}

// serve sends s its deltas until done is closed or the compiler stops.
func (c *Compiler) serve(s *subscriber, out chan<- api.Delta, done <-chan struct{}) {
	defer func() {
		c.mu.Lock()
		c.model.unsubscribe(s)
		c.mu.Unlock()
		close(out)
	}()
	for {
		select {
		case <-done:
			return
		case <-c.stopped:
			return
		case <-s.notify:
		}
		c.mu.RLock()
		d, ok := c.model.delta(s)
		c.mu.RUnlock()
		if !ok {
			continue
		}
		select {
		case out <- d:
		case <-done:
			return
		case <-c.stopped:
			return
		}
	}
}
