package agent

import (
	"context"
	"fmt"
	"sync"
	"time"

	log "github.com/sirupsen/logrus"

	"github.com/kovs-net/kovs/go-controller/pkg/policy"
)

// PolicyFeed delivers the node's NetworkPolicy share from kovs-controller: Run calls the
// sink's Snapshot on every (re)connect and Delta for every change after it, until ctx
// ends. The stream client to kovs-controller is one.
type PolicyFeed interface {
	Run(ctx context.Context, sink policy.Sink) error
}

// NodePolicy is the agent's policy.Sink: it keeps the node's share as the controller
// sends it, hands every version to the NodeState (so the flow syncer installs its flows in
// the same bundles as the rest of the node's), and reports which version is installed.
type NodePolicy struct {
	node  string
	state *NodeState
	// installed returns the NodeState generation whose flows are on the switch.
	installed func() uint64

	mu    sync.Mutex
	share policy.NodeShare
	have  bool // a snapshot arrived
	// enforced is the last version handed to the NodeState: the share, or its meet with
	// floor while floor is set (after a snapshot with MeetPrevious, until a Release).
	enforced policy.NodeShare
	floor    *policy.NodeShare
	waiting  []realization
	// realized is the share generation of the newest version whose flows are installed.
	realized uint64
	// changed has a token when Realized may have moved on.
	changed chan struct{}
	// received is closed by the first snapshot.
	received     chan struct{}
	receivedOnce sync.Once
	// controllerErr is why the controller's policy is refused (it is older than this
	// agent), nil while it is taken; onController is told when that changes.
	controllerErr error
	onController  func(error)
}

// realization pairs a share generation with the NodeState generation that holds it.
type realization struct{ share, state uint64 }

var _ policy.Sink = (*NodePolicy)(nil)

// NewNodePolicy returns the sink of node's share; installed reports the NodeState
// generation whose flows are installed (the flow syncer's).
func NewNodePolicy(node string, state *NodeState, installed func() uint64) *NodePolicy {
	return &NodePolicy{node: node, state: state, installed: installed, changed: make(chan struct{}, 1),
		received: make(chan struct{})}
}

// Received is closed once the first snapshot arrived.
func (p *NodePolicy) Received() <-chan struct{} { return p.received }

// RealizedChanged has a token whenever Realized may return a newer generation (the flows
// of a waiting version were installed), so the stream client reports without polling.
func (p *NodePolicy) RealizedChanged() <-chan struct{} { return p.changed }

// flowsInstalled is told the NodeState generation of every successful flow sync.
func (p *NodePolicy) flowsInstalled(gen uint64) {
	p.mu.Lock()
	ready := len(p.waiting) > 0 && p.waiting[0].state <= gen
	p.mu.Unlock()
	if ready {
		select {
		case p.changed <- struct{}{}:
		default:
		}
	}
}

// Snapshot replaces the share. It refuses another node's share and a share that is not
// self-contained.
func (p *NodePolicy) Snapshot(share policy.NodeShare) error {
	if share.Node != p.node {
		return fmt.Errorf("policy snapshot for node %s received by node %s", share.Node, p.node)
	}
	if err := share.Validate(); err != nil {
		return fmt.Errorf("policy snapshot %d for node %s: %w", share.Generation, p.node, err)
	}
	share = share.Clone() // the sender may keep using its copy
	p.mu.Lock()
	defer p.mu.Unlock()
	switch {
	case share.MeetPrevious && p.have:
		// A controller that does not know what this node enforces (it just started
		// leading): keep enforcing nothing the previous version did not allow until it
		// releases us, which it does once every node holds such a meet.
		floor := p.enforced
		p.floor = &floor
	case !share.MeetPrevious:
		p.floor = nil
	}
	p.share, p.have = share, true
	p.install(p.effective())
	p.receivedOnce.Do(func() { close(p.received) })
	log.WithField("node", p.node).WithField("generation", share.Generation).WithField("rules", len(share.Rules)).
		WithField("pods", len(share.Pods)).Info("NetworkPolicy snapshot received")
	return nil
}

// Delta applies a change to the share. A delta that does not follow the share (a missed
// delta, or none before the first snapshot) leaves it unchanged and returns an error
// wrapping policy.ErrGeneration: the sender should reconnect for a new snapshot.
func (p *NodePolicy) Delta(d policy.Delta) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.have {
		return fmt.Errorf("policy delta %d->%d for node %s before any snapshot: %w",
			d.FromGeneration, d.Generation, p.node, policy.ErrGeneration)
	}
	next := p.share.Clone() // the NodeState keeps the current share: never change it in place
	if err := d.Apply(&next); err != nil {
		return fmt.Errorf("apply policy delta: %w", err)
	}
	p.share = next
	if d.Release && p.floor != nil {
		log.WithField("node", p.node).WithField("generation", d.Generation).Info("NetworkPolicy meet with the previous share released")
		p.floor = nil
	}
	p.install(p.effective())
	return nil
}

// effective is what the node enforces of the share: the share itself, or its meet with the
// floor. Called with mu held.
func (p *NodePolicy) effective() policy.NodeShare {
	if p.floor == nil {
		return p.share
	}
	return policy.Meet(*p.floor, p.share)
}

// install hands a version of the share to the NodeState. Called with mu held.
func (p *NodePolicy) install(share policy.NodeShare) {
	p.enforced = share
	gen := p.state.SetPolicy(share)
	p.waiting = append(p.waiting, realization{share: share.Generation, state: gen})
}

// Realized returns the generation of the newest share version whose flows are installed
// on br-int, 0 before any is. It follows the versions in the order they arrived: after a
// new snapshot (a reconnect, perhaps to a restarted controller whose generations start
// over) it reports that snapshot's generation once its flows are in, even if lower.
func (p *NodePolicy) Realized() uint64 {
	installed := p.installed()
	p.mu.Lock()
	defer p.mu.Unlock()
	for len(p.waiting) > 0 && p.waiting[0].state <= installed {
		p.realized = p.waiting[0].share
		p.waiting = p.waiting[1:]
	}
	return p.realized
}

// runPolicyFeed runs the feed until ctx ends, restarting it (with a growing pause) when it
// returns early: the node keeps enforcing the last share meanwhile.
func runPolicyFeed(ctx context.Context, feed PolicyFeed, sink policy.Sink, node string) {
	pause := time.Second
	for {
		err := feed.Run(ctx, sink)
		if ctx.Err() != nil {
			return
		}
		log.WithError(err).WithField("node", node).WithField("retry-in", pause).
			Warn("NetworkPolicy feed from kovs-controller stopped; enforcing the last policy received")
		select {
		case <-ctx.Done():
			return
		case <-time.After(pause):
		}
		pause = min(2*pause, 30*time.Second)
	}
}
