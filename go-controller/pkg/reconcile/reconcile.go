// Package reconcile is the one level-driven controller loop every kovs feature uses: event
// handlers only enqueue keys; workers call the feature's Reconcile(key) with rate-limited
// retries and a maximum retry count; nothing runs before the caches have synced.
package reconcile

import (
	"context"
	"fmt"
	"sync"
	"time"

	log "github.com/sirupsen/logrus"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
)

// Reconciler brings the world in line with the desired state of one key. It must be
// level-triggered: it reads the current desired state itself and never relies on which
// event enqueued the key.
type Reconciler interface {
	Reconcile(ctx context.Context, key string) error
}

// Func adapts a function to Reconciler.
type Func func(ctx context.Context, key string) error

// Reconcile calls f.
func (f Func) Reconcile(ctx context.Context, key string) error { return f(ctx, key) }

// Options tune a Controller.
type Options struct {
	Name       string
	Workers    int
	MaxRetries int
	// BaseDelay and MaxDelay bound the per-key exponential retry backoff.
	BaseDelay, MaxDelay time.Duration
	// Metrics, if set, instrument the controller under Name.
	Metrics *Metrics
}

// Controller runs a Reconciler over a work queue of keys.
type Controller struct {
	opts   Options
	rec    Reconciler
	queue  workqueue.TypedRateLimitingInterface[string]
	synced []cache.InformerSynced
	log    *log.Entry
}

// New builds a controller; Run starts it.
func New(opts Options, rec Reconciler, synced ...cache.InformerSynced) *Controller {
	if opts.Workers <= 0 {
		opts.Workers = 2
	}
	if opts.MaxRetries <= 0 {
		opts.MaxRetries = 15
	}
	if opts.BaseDelay <= 0 {
		opts.BaseDelay = 100 * time.Millisecond
	}
	if opts.MaxDelay <= 0 {
		opts.MaxDelay = 30 * time.Second
	}
	limiter := workqueue.NewTypedItemExponentialFailureRateLimiter[string](opts.BaseDelay, opts.MaxDelay)
	queueCfg := workqueue.TypedRateLimitingQueueConfig[string]{Name: opts.Name, MetricsProvider: opts.Metrics.provider()}
	return &Controller{
		opts:   opts,
		rec:    rec,
		queue:  workqueue.NewTypedRateLimitingQueueWithConfig(limiter, queueCfg),
		synced: synced,
		log:    log.WithField("controller", opts.Name),
	}
}

// Enqueue adds a key.
func (c *Controller) Enqueue(key string) { c.queue.Add(key) }

// EnqueueAfter adds a key after a delay.
func (c *Controller) EnqueueAfter(key string, d time.Duration) { c.queue.AddAfter(key, d) }

// EnqueueObject adds the namespace/name key of an informer object (tombstones included).
func (c *Controller) EnqueueObject(obj interface{}) {
	if key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj); err == nil {
		c.queue.Add(key)
	}
}

// Handler returns informer event handlers that enqueue the object's key.
func (c *Controller) Handler() cache.ResourceEventHandler {
	return cache.ResourceEventHandlerFuncs{
		AddFunc:    c.EnqueueObject,
		UpdateFunc: func(_, obj interface{}) { c.EnqueueObject(obj) },
		DeleteFunc: c.EnqueueObject,
	}
}

// Len is the queue depth.
func (c *Controller) Len() int { return c.queue.Len() }

// Run waits for the caches, runs the workers until ctx ends, then drains.
func (c *Controller) Run(ctx context.Context) error {
	defer c.queue.ShutDown()
	if !cache.WaitForCacheSync(ctx.Done(), c.synced...) {
		return fmt.Errorf("%s: caches did not sync", c.opts.Name)
	}
	var wg sync.WaitGroup
	for i := 0; i < c.opts.Workers; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for c.processNext(ctx) {
			}
		}()
	}
	<-ctx.Done()
	c.queue.ShutDown()
	wg.Wait()
	return nil
}

func (c *Controller) processNext(ctx context.Context) bool {
	key, quit := c.queue.Get()
	if quit {
		return false
	}
	defer c.queue.Done(key)
	done := c.opts.Metrics.begin(c.opts.Name, key)
	err := c.rec.Reconcile(ctx, key)
	done(err)
	switch {
	case err == nil:
		c.queue.Forget(key)
	case c.queue.NumRequeues(key) < c.opts.MaxRetries:
		c.log.WithError(err).WithField("key", key).Debug("reconcile failed, retrying")
		c.queue.AddRateLimited(key)
	default:
		c.log.WithError(err).WithField("key", key).Error("reconcile failed, giving up until the next change")
		c.queue.Forget(key)
	}
	return true
}
