package ovs

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/ovn-kubernetes/libovsdb/cache"
	"github.com/ovn-kubernetes/libovsdb/model"
)

// waitFor waits until cond, read on the cache, is true or ctx is done. It looks again
// every time the cache changes (a monitor update: ovs-vswitchd's cur_cfg, an
// interface's ofport), so it returns as soon as the change it waits for is cached, and
// at least every poll interval besides.
func (c *OVSDB) waitFor(ctx context.Context, what string, cond func() (bool, error)) error {
	ticker := time.NewTicker(c.poll)
	defer ticker.Stop()
	for {
		// The channel is taken before cond reads the cache: a change cached after the
		// read closes it.
		changed := c.changes.next(c.client.Cache())
		done, err := cond()
		if err != nil {
			return err
		}
		if done {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("wait for %s: %w", what, ctx.Err())
		case <-changed:
		case <-ticker.C:
		}
	}
}

// cacheChanges tells the waiters of OVSDB.waitFor that the cache changed: it closes the
// current channel on every cache event and hands out a new one. libovsdb builds a new
// cache on every reconnection, without the old one's handlers, so the handler is
// registered again on whichever cache is current when a waiter asks.
type cacheChanges struct {
	mu      sync.Mutex
	ch      chan struct{}
	watched *cache.TableCache // the cache the handler is registered on
}

func newCacheChanges() *cacheChanges { return &cacheChanges{ch: make(chan struct{})} }

// next returns the channel the next change of current closes (current may be nil: not
// connected; the channel then closes on a change of a later cache a waiter asks about).
// The handler is registered outside mu: libovsdb calls handlers holding its own lock,
// which AddEventHandler takes too.
func (w *cacheChanges) next(current *cache.TableCache) <-chan struct{} {
	w.mu.Lock()
	register := current != nil && current != w.watched
	if register {
		w.watched = current
	}
	ch := w.ch
	w.mu.Unlock()
	if register {
		current.AddEventHandler(&cache.EventHandlerFuncs{
			AddFunc:    func(string, model.Model) { w.notify() },
			UpdateFunc: func(string, model.Model, model.Model) { w.notify() },
			DeleteFunc: func(string, model.Model) { w.notify() },
		})
	}
	return ch
}

// notify wakes the waiters (a replaced cache's late events too: that costs them one look
// at the cache).
func (w *cacheChanges) notify() {
	w.mu.Lock()
	defer w.mu.Unlock()
	close(w.ch)
	w.ch = make(chan struct{})
}
