package transition

import (
	"context"
	"fmt"
	"sync"
	"time"

	log "github.com/sirupsen/logrus"

	"github.com/kovs-net/kovs/go-controller/pkg/controller/networkpolicy"
	"github.com/kovs-net/kovs/go-controller/pkg/policy"
)

// DefaultTimeout is how long a relaxation waits for the restrictions before it.
const DefaultTimeout = 10 * time.Second

// Options tune a Gate.
type Options struct {
	// Base is added to every generation the gate hands out (stream.Rebase's reason: the
	// generations a node sees must grow across controller restarts).
	Base uint64
	// Timeout is how long the relaxations wait for a node to realize a restriction
	// before that node is held (it gets no relaxation until it reports) and the others
	// go on. Zero: DefaultTimeout.
	Timeout time.Duration
	// Held, if set, is told of the nodes that did not realize a restriction in time.
	Held func(nodes []string)
	// Waited, if set, is told how long each batch of relaxations sent together waited
	// for the restrictions before them (the longest wait among them).
	Waited func(time.Duration)
}

// Gate stands between the policy compiler and the nodes' receivers (the stream server
// and the realization tracker): it is their stream.Source, and takes the agents'
// realization reports (stream.Reports). See the package documentation.
type Gate struct {
	compiler *networkpolicy.Compiler
	opts     Options
	kicks    chan struct{}
	started  chan struct{}
	stopped  chan struct{}

	mu   sync.Mutex
	core *core
	// added has a channel per node a Watch waits for, closed once the gate follows it.
	added map[string]chan struct{}
}

// New returns a gate over the compiler; Run it.
func New(compiler *networkpolicy.Compiler, opts Options) *Gate {
	if opts.Timeout <= 0 {
		opts.Timeout = DefaultTimeout
	}
	return &Gate{compiler: compiler, opts: opts, kicks: make(chan struct{}, 1), started: make(chan struct{}),
		stopped: make(chan struct{}), added: map[string]chan struct{}{}}
}

func (g *Gate) kick() {
	select {
	case g.kicks <- struct{}{}:
	default:
	}
}

// Run moves the nodes' shares until ctx ends or the compiler stops.
func (g *Gate) Run(ctx context.Context) error {
	defer close(g.stopped)
	feed, err := g.compiler.NewFeed(ctx, g.kick)
	if err != nil {
		return err
	}
	c := newCore(feed, g.opts.Base, g.opts.Timeout)
	c.onHeld = func(nodes []string, gen uint64) {
		log.WithField("nodes", nodes).WithField("timeout", g.opts.Timeout).
			Warn("nodes did not realize a policy restriction in time: they get no relaxation until they do, the other nodes go on")
		if g.opts.Held != nil {
			g.opts.Held(nodes)
		}
	}
	if g.opts.Waited != nil {
		c.onWaited = g.opts.Waited
	}
	g.mu.Lock()
	g.core = c
	g.mu.Unlock()
	close(g.started)
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		g.mu.Lock()
		next := c.advance(time.Now())
		for name, ch := range g.added {
			if _, ok := c.nodes[name]; ok {
				close(ch)
				delete(g.added, name)
			}
		}
		g.mu.Unlock()
		if !next.IsZero() {
			timer.Reset(time.Until(next))
		}
		select {
		case <-g.kicks:
		case <-timer.C:
		case <-feed.Stopped():
			return nil
		case <-ctx.Done():
			return nil
		}
	}
}

// Realized records a generation a node's agent reports realized (stream.Reports).
func (g *Gate) Realized(node string, generation uint64) {
	g.mu.Lock()
	if g.core != nil {
		g.core.realized(node, generation)
	}
	g.mu.Unlock()
	g.kick()
}

// Watch returns the node's share as the gate has sent it and the deltas that follow
// (stream.Source). A node the gate does not follow yet is added at its next cut (which
// waits while a relaxation has waited more than a second, until it goes out).
func (g *Gate) Watch(ctx context.Context, node string) (policy.NodeShare, <-chan policy.Delta, func(), error) {
	select {
	case <-g.started:
	case <-g.stopped:
		return policy.NodeShare{}, nil, nil, networkpolicy.ErrStopped
	case <-ctx.Done():
		return policy.NodeShare{}, nil, nil, fmt.Errorf("watch the policy of node %s: %w", node, ctx.Err())
	}
	for {
		g.mu.Lock()
		if n, ok := g.core.nodes[node]; ok {
			delete(g.core.removes, node)
			r := newReceiver(n.sent.Generation)
			n.receivers = append(n.receivers, r)
			share := n.sent.Clone()
			share.MeetPrevious = n.floor != 0
			g.mu.Unlock()
			return share, g.serve(node, r), g.cancelFunc(node, r), nil
		}
		g.core.adds[node] = struct{}{}
		added, ok := g.added[node]
		if !ok {
			added = make(chan struct{})
			g.added[node] = added
		}
		g.mu.Unlock()
		g.kick()
		select {
		case <-added:
		case <-g.stopped:
			return policy.NodeShare{}, nil, nil, networkpolicy.ErrStopped
		case <-ctx.Done():
			return policy.NodeShare{}, nil, nil, fmt.Errorf("watch the policy of node %s: %w", node, ctx.Err())
		}
	}
}

// serve delivers r's deltas until it is cancelled or the gate stops.
func (g *Gate) serve(node string, r *receiver) <-chan policy.Delta {
	out := make(chan policy.Delta)
	done := make(chan struct{})
	r.done = done
	go func() {
		defer close(out)
		for {
			select {
			case <-r.wake:
			case <-done:
				return
			case <-g.stopped:
				return
			}
			g.mu.Lock()
			n, ok := g.core.nodes[node]
			var d policy.Delta
			if ok {
				d, ok = r.delta(&n.sent, g.core.memo)
			}
			g.mu.Unlock()
			if !ok {
				continue
			}
			select {
			case out <- d:
			case <-done:
				return
			case <-g.stopped:
				return
			}
		}
	}()
	return out
}

// cancelFunc ends a receiver: the node is let go at the next step when it was the last.
func (g *Gate) cancelFunc(node string, r *receiver) func() {
	var once sync.Once
	return func() {
		once.Do(func() {
			close(r.done)
			g.mu.Lock()
			defer g.mu.Unlock()
			n, ok := g.core.nodes[node]
			if !ok {
				return
			}
			for i, x := range n.receivers {
				if x == r {
					n.receivers = append(n.receivers[:i:i], n.receivers[i+1:]...)
					break
				}
			}
			if len(n.receivers) == 0 {
				g.core.removes[node] = struct{}{}
				delete(g.core.adds, node)
			}
		})
	}
}
