package transition

import (
	"slices"
	"time"

	"github.com/kovs-net/kovs/go-controller/pkg/controller/networkpolicy"
	"github.com/kovs-net/kovs/go-controller/pkg/policy"
)

// cutSource is where the core takes the compiler's shares from, one consistent cut at a
// time (networkpolicy.Feed).
type cutSource interface {
	Take(add, remove []string) networkpolicy.Cut
}

// nodeState is what the gate knows of one node. Whatever changes restriction, held,
// diverged, floor, floorRealized or floorHeld calls core.reindex, which keeps the core's
// indexes of its nodes.
type nodeState struct {
	name string
	// target is the compiler's share; sent is what the node's receivers are, or will
	// be, at: target, or a meet on the way to it.
	target, sent policy.NodeShare
	// diverged names what may differ between sent and target.
	diverged policy.Changes
	// restriction is the generation of the last meet sent to the node that it has not
	// reported realized (0: none). While any node has one, no relaxation is sent.
	restriction uint64
	// restrictionSince is when the oldest restriction the node has not realized was sent.
	restrictionSince time.Time
	// held: the node did not report its restriction in time; it gets no relaxation
	// until it does, and holds up nobody else meanwhile.
	held      bool
	realized  uint64
	receivers []*receiver
	// floor is the generation of the node's first share from this gate, sent with
	// MeetPrevious: the gate does not know what the node enforced before (another leader
	// sent it), so the node enforces the meet of that and what it is sent, until every
	// node with a floor has realized its first share and the gate releases them all
	// (0: no floor).
	floor         uint64
	floorSince    time.Time
	floorRealized bool
	floorHeld     bool
	// blockingAt and floorAt are the node's places in core.blocking and core.floors.
	blockingAt, floorAt int
}

// core is the gate's logic without goroutines: the caller serializes every call.
type core struct {
	src     cutSource
	timeout time.Duration
	gen     uint64
	nodes   map[string]*nodeState
	// adds and removes are the nodes to start and stop following at the next cut.
	adds, removes map[string]struct{}
	// waitingSince is when the relaxations started waiting for restrictions.
	waitingSince time.Time
	// cutWhileWaiting is how long new cuts (restrictions) still go out while relaxations
	// wait.
	cutWhileWaiting time.Duration
	// onHeld is told of the nodes that did not realize a restriction in time.
	onHeld func(nodes []string, gen uint64)
	// onWaited is told how long each transition's relaxations waited.
	onWaited func(time.Duration)
	// gone are the pods removed (and their addresses) since no node that is not held
	// had anything left to release: meets keep them (package policy, Gone).
	gone policy.Gone
	// memo is the set operations of the last cut and the receivers' deltas since: every
	// node holding a set gets the same patch, meet and diff of it, computed once, and the
	// nodes share the lists (a new memo per cut, so that old lists are let go).
	memo *policy.SetMemo

	// The indexes of the nodes (index.go), kept by reindex. blocking are the nodes whose
	// restriction holds up the relaxations (restriction != 0, not held), oldest
	// restriction first.
	blocking nodeQueue
	// toRelease are the nodes that are not held and wait for a relaxation (diverged is not
	// empty): release sends them their targets.
	toRelease map[*nodeState]struct{}
	// floors are the nodes whose floor is neither realized nor held, oldest first;
	// floorsRealized those whose floor is realized, released together once floors is
	// empty.
	floors         nodeQueue
	floorsRealized map[*nodeState]struct{}
}

func newCore(src cutSource, base uint64, timeout time.Duration) *core {
	return &core{src: src, timeout: timeout, gen: base, cutWhileWaiting: min(time.Second, timeout/2), nodes: map[string]*nodeState{},
		adds: map[string]struct{}{}, removes: map[string]struct{}{}, onHeld: func([]string, uint64) {}, onWaited: func(time.Duration) {},
		blocking: newBlockingQueue(), toRelease: map[*nodeState]struct{}{}, floors: newFloorQueue(), floorsRealized: map[*nodeState]struct{}{}}
}

// waiting lists the nodes whose restriction holds up the relaxations (held nodes do not).
func (c *core) waiting() []string {
	out := make([]string, 0, c.blocking.Len())
	for _, n := range c.blocking.nodes {
		out = append(out, n.name)
	}
	return out
}

// realized records a node's report.
func (c *core) realized(name string, gen uint64) {
	n, ok := c.nodes[name]
	if !ok {
		return
	}
	n.realized = max(n.realized, gen)
	if n.restriction != 0 && n.realized >= n.restriction {
		n.restriction, n.held = 0, false
	}
	if n.floor != 0 && n.realized >= n.floor {
		n.floorRealized = true
	}
	c.reindex(n)
}

// advance moves every node as far as it may go now, and returns when it should be
// called again at the latest (zero: on the next event). Restrictions (meets) go out as
// soon as the compiler has them, unless a relaxation is waiting; relaxations only when no
// restriction is waiting to be realized. So new cuts are taken while restrictions are
// being realized only until some relaxation waits (and for at most cutWhileWaiting):
// a stream of restrictions never starves a relaxation, which waits only for the
// restrictions sent before it (changes made meanwhile coalesce in the compiler).
func (c *core) advance(now time.Time) time.Time {
	if late := c.holdLate(now); len(late) > 0 {
		c.onHeld(late, c.gen)
	}
	if c.blocking.Len() > 0 {
		if !c.relaxing() && now.Sub(c.waitingSince) < c.cutWhileWaiting {
			c.cut(now)
		}
		return earliest(c.deadline(), c.releaseFloors(now))
	}
	if !c.waitingSince.IsZero() {
		c.onWaited(now.Sub(c.waitingSince))
		c.waitingSince = time.Time{}
	}
	c.release()
	c.cut(now)
	floors := c.releaseFloors(now)
	if c.blocking.Len() > 0 {
		c.waitingSince = now
		return earliest(c.deadline(), floors)
	}
	// Nothing to wait for: what the cut relaxed goes out at once.
	c.release()
	return floors
}

// relaxing reports whether some node that is not held waits for its relaxation: then no
// new cut is taken until it goes out, so that it waits only for the restrictions already
// sent.
func (c *core) relaxing() bool {
	return len(c.toRelease) > 0
}

// holdLate holds the waiting nodes whose restriction is older than the timeout, and
// lists them.
func (c *core) holdLate(now time.Time) []string {
	var out []string
	for n := c.blocking.front(); n != nil && !now.Before(n.restrictionSince.Add(c.timeout)); n = c.blocking.front() {
		n.held = true
		c.reindex(n)
		out = append(out, n.name)
	}
	slices.Sort(out)
	return out
}

// deadline is when the oldest waiting restriction times out (zero: none waits).
func (c *core) deadline() time.Time {
	n := c.blocking.front()
	if n == nil {
		return time.Time{}
	}
	return n.restrictionSince.Add(c.timeout)
}

// earliest is the earlier of two deadlines, zero meaning none.
func earliest(a, b time.Time) time.Time {
	if a.IsZero() || (!b.IsZero() && b.Before(a)) {
		return b
	}
	return a
}

// releaseFloors ends the floors of the nodes that realized their first share once no
// other node's floor is still waiting to be realized; a node whose floor is not realized
// within the timeout is held (it keeps its floor until it reports) and stops holding up
// the others. It returns when it should be called again at the latest.
func (c *core) releaseFloors(now time.Time) time.Time {
	var held []string
	for n := c.floors.front(); n != nil && !now.Before(n.floorSince.Add(c.timeout)); n = c.floors.front() {
		n.floorHeld = true
		c.reindex(n)
		held = append(held, n.name)
	}
	if len(held) > 0 {
		slices.Sort(held)
		c.onHeld(held, c.gen)
	}
	if n := c.floors.front(); n != nil {
		return n.floorSince.Add(c.timeout)
	}
	var gen uint64
	for n := range c.floorsRealized {
		if gen == 0 {
			c.gen++
			gen = c.gen
		}
		n.floor, n.floorRealized, n.floorHeld = 0, false, false
		c.reindex(n)
		n.sent.Generation = gen
		for _, r := range n.receivers {
			r.release = true
			r.kick()
		}
	}
	return time.Time{}
}

// release sends every node that is not held its target. Then only held nodes may differ
// from their targets, and the gone pods are forgotten (a held node's next meet drops
// them: more than it needs to, never less). It goes through the nodes that wait for a
// relaxation (toRelease), not every node.
func (c *core) release() {
	var gen uint64
	for n := range c.toRelease {
		if gen == 0 {
			c.gen++
			gen = c.gen
		}
		c.set(n, n.diverged, entriesOf(&n.target, n.diverged), n.target.Isolation, n.target.Pods, n.target.ClusterRules, gen)
		n.diverged = policy.NewChanges()
		c.reindex(n)
	}
	c.gone = policy.Gone{}
}

// cut takes the compiler's changes and sends every changed node the meet of what it was
// sent and its new target.
func (c *core) cut(now time.Time) {
	add, remove := keysOf(c.adds), keysOf(c.removes)
	clear(c.adds)
	clear(c.removes)
	cut := c.src.Take(add, remove)
	c.gone.Merge(cut.Gone)
	c.memo = policy.NewSetMemo()
	for _, name := range remove {
		if n, ok := c.nodes[name]; ok {
			c.unindex(n)
			delete(c.nodes, name)
		}
	}
	var gen uint64
	next := func() uint64 {
		if gen == 0 {
			c.gen++
			gen = c.gen
		}
		return gen
	}
	for name, share := range cut.Shares {
		// A node new to this gate (a new node, or every node after a controller
		// start) is sent its target, to be met with whatever it enforces (a share
		// of another leader, perhaps in the middle of a transition) until every such
		// node has realized its first share.
		target := share.Clone()
		sent := share.Clone()
		sent.Generation = next()
		if old, ok := c.nodes[name]; ok {
			c.unindex(old)
		}
		n := &nodeState{name: name, target: target, sent: sent, diverged: policy.NewChanges(),
			floor: sent.Generation, floorSince: now}
		c.nodes[name] = n
		c.reindex(n)
	}
	for name, d := range cut.Deltas {
		n, ok := c.nodes[name]
		if !ok {
			continue
		}
		if err := d.ApplyWith(&n.target, c.memo); err != nil {
			// The compiler's deltas always follow; this is a bug, not an input error.
			panic("transition gate: " + err.Error())
		}
		n.diverged.Add(policy.DeltaChanges(d))
		m := policy.MeetOver(&n.sent, &n.target, n.diverged, c.gone, c.memo)
		if !c.differs(n, m) {
			// What the delta changed waits for its release.
			c.reindex(n)
			continue
		}
		g := next()
		c.set(n, n.diverged, m.Entries, m.Isolation, m.Pods, m.ClusterRules, g)
		if n.restriction == 0 {
			n.restrictionSince = now
		}
		n.restriction = g
		if n.realized >= g {
			n.restriction = 0
		}
		n.diverged = diverged(&n.sent, &n.target, n.diverged, c.memo)
		c.reindex(n)
	}
}

// diverged returns what of c still differs between sent and target: a meet that is the
// target already (a change that only restricts) leaves nothing to release.
func diverged(sent, target *policy.NodeShare, c policy.Changes, memo *policy.SetMemo) policy.Changes {
	out := policy.NewChanges()
	for k := range c.Entries {
		if !memo.EqualEntries(sent.Entry(k), target.Entry(k), k.Kind) {
			out.Entries[k] = struct{}{}
		}
	}
	out.Isolation = c.Isolation && !sent.Isolation.Equal(target.Isolation)
	out.Pods = c.Pods && !slices.Equal(sent.Pods, target.Pods)
	out.ClusterRules = c.ClusterRules && !policy.EqualClusterRules(sent.ClusterRules, target.ClusterRules)
	return out
}

// differs reports whether the meet changes what n was sent.
func (c *core) differs(n *nodeState, m policy.MeetResult) bool {
	for k, e := range m.Entries {
		if !c.memo.EqualEntries(e, n.sent.Entry(k), k.Kind) {
			return true
		}
	}
	return !m.Isolation.Equal(n.sent.Isolation) || !slices.Equal(m.Pods, n.sent.Pods) ||
		!policy.EqualClusterRules(m.ClusterRules, n.sent.ClusterRules)
}

// set changes n's sent share to the given entries, isolation, pods and cluster rules at
// generation gen, recording for every receiver what it had.
func (c *core) set(n *nodeState, what policy.Changes, entries map[policy.EntryKey]policy.Entry, iso policy.Isolation,
	pods []policy.PodKey, cluster []policy.ClusterRule, gen uint64) {
	for _, r := range n.receivers {
		for k := range entries {
			if _, ok := r.before[k]; !ok {
				r.before[k] = n.sent.Entry(k)
			}
		}
		if what.Isolation && r.isolation == nil {
			was := n.sent.Isolation
			r.isolation = &was
		}
		if what.Pods && r.pods == nil {
			was := n.sent.Pods
			r.pods = &was
		}
		if what.ClusterRules && r.cluster == nil {
			was := n.sent.ClusterRules
			r.cluster = &was
		}
	}
	for k, e := range entries {
		n.sent.SetEntry(k, e)
	}
	if what.Isolation {
		n.sent.Isolation = iso
	}
	if what.Pods {
		n.sent.Pods = pods
	}
	if what.ClusterRules {
		n.sent.ClusterRules = cluster
	}
	n.sent.Generation = gen
	for _, r := range n.receivers {
		r.kick()
	}
}

// entriesOf returns share's entries for what c names.
func entriesOf(share *policy.NodeShare, c policy.Changes) map[policy.EntryKey]policy.Entry {
	out := make(map[policy.EntryKey]policy.Entry, len(c.Entries))
	for k := range c.Entries {
		out[k] = share.Entry(k)
	}
	return out
}

func keysOf(m map[string]struct{}) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}
