package networkpolicy

import (
	"context"
	"fmt"

	"k8s.io/apimachinery/pkg/types"

	"github.com/kovs-net/kovs/go-controller/pkg/policy"
)

// Feed follows the shares of many nodes at once and hands out their changes as one cut:
// every share a Take returns is at the same generation of the compiler, so that a reader
// never combines one node's share after a batch with another node's share before it. The
// transition gate (package transition) reads the compiler through a Feed; Watch serves
// one node alone.
type Feed struct {
	c    *Compiler
	wake func()
	subs map[string]*subscriber
	// behind are the subscribers of subs that have a delta to take (see behindSet): a
	// Take costs them, not every node the feed follows. Guarded by the compiler's lock,
	// like the model that fills it.
	behind behindSet
}

// NewFeed waits until the compiler is Ready and returns a feed of no nodes; wake is called
// (outside the compiler's lock, and never blocking on it) after every batch that changed
// a node the feed follows.
func (c *Compiler) NewFeed(ctx context.Context, wake func()) (*Feed, error) {
	select {
	case <-c.ready:
	case <-c.stopped:
		return nil, ErrStopped
	case <-ctx.Done():
		return nil, fmt.Errorf("follow the policy compiler: %w", ctx.Err())
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.newFeed(wake), nil
}

// newFeed returns a feed of no nodes on a compiler that is ready; the caller holds the
// compiler's lock.
func (c *Compiler) newFeed(wake func()) *Feed {
	c.model.trackGone = true
	return &Feed{c: c, wake: wake, subs: map[string]*subscriber{}, behind: behindSet{}}
}

// Stopped is closed when the compiler stops.
func (f *Feed) Stopped() <-chan struct{} { return f.c.stopped }

// Cut is what one Take returns: the shares of the nodes it started following and the
// deltas of the nodes it already followed, all at Generation, and the pods removed since
// the last Take (deleted or terminated, not back under the same UID) with their
// addresses.
type Cut struct {
	Generation uint64
	Shares     map[string]policy.NodeShare
	Deltas     map[string]policy.Delta
	Gone       policy.Gone
}

// Take stops following the nodes of remove, starts following those of add, and returns
// the new nodes' shares and the other nodes' deltas since the last Take, all under one
// hold of the compiler's lock: one cut of the compiler's state. A node whose share did
// not change has no delta. The shares may be shared with the compiler: Clone them before
// changing them.
func (f *Feed) Take(add, remove []string) Cut {
	f.c.mu.Lock()
	defer f.c.mu.Unlock()
	for _, name := range remove {
		if s, ok := f.subs[name]; ok {
			delete(f.subs, name)
			f.c.model.unsubscribe(s)
		}
	}
	cut := Cut{Generation: f.c.model.generation, Deltas: map[string]policy.Delta{}, Gone: f.c.model.takeGone()}
	// delta takes s out of f.behind; deleting the entry being visited is safe in a range.
	for s := range f.behind {
		if d, ok := f.c.model.delta(s); ok {
			cut.Deltas[s.node.name] = d
		}
	}
	for _, name := range add {
		if _, ok := f.subs[name]; ok {
			continue
		}
		s, share := f.c.model.subscribe(name)
		s.wake, s.behind = f.wake, f.behind // caught up: it joins behind at the next commit that touches it
		f.subs[name] = s
		if cut.Shares == nil {
			cut.Shares = map[string]policy.NodeShare{}
		}
		cut.Shares[name] = share
	}
	return cut
}

// takeGone returns the pods removed since the last call that are not back (a pod that
// moved is removed and added again under its UID), with their addresses.
func (m *model) takeGone() policy.Gone {
	g := policy.Gone{}
	for _, p := range m.gone {
		if now, ok := m.pods[types.NamespacedName{Namespace: p.key.Namespace, Name: p.key.Name}]; ok && now.uid == p.key.UID {
			continue
		}
		g.Add(p.key, p.ips)
	}
	m.gone = m.gone[:0]
	return g
}
