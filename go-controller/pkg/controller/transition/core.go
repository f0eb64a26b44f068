package transition

import (
	"math"
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

// nodeState is what the gate knows of one node. Whatever changes restrictions, held,
// diverged, relaxEpoch, floor, floorRealized or floorHeld calls core.reindex, which keeps
// the core's indexes of its nodes.
type nodeState struct {
	name string
	// target is the compiler's share; sent is what the node's receivers are, or will
	// be, at: target, or a meet on the way to it.
	target, sent policy.NodeShare
	// diverged names what may differ between sent and target.
	diverged policy.Changes
	// restrictions are the meets sent to the node that it has not reported realized,
	// oldest first. A relaxation waits for every restriction of its epoch or older on the
	// nodes that are not held.
	restrictions []sentRestriction
	// held: the node did not report its restriction in time; it gets no relaxation
	// until it does, and holds up nobody else meanwhile.
	held     bool
	realized uint64
	// relaxEpoch is the gate's generation when the node's relaxation (what diverged
	// names) was last added to: it goes out once no node that is not held has an
	// unrealized restriction of that generation or older. relaxFirst and relaxSince are
	// the generation and the time it began waiting (an addition does not move them).
	relaxEpoch, relaxFirst uint64
	relaxSince             time.Time
	receivers              []*receiver
	// floor is the generation of the node's first share from this gate, sent with
	// MeetPrevious: the gate does not know what the node enforced before (another leader
	// sent it), so the node enforces the meet of that and what it is sent, until every
	// node with a floor has realized its first share and the gate releases them all
	// (0: no floor).
	floor         uint64
	floorSince    time.Time
	floorRealized bool
	floorHeld     bool
	// blockingAt, floorAt, relaxAt and relaxAgeAt are the node's places in
	// core.blocking, core.floors, core.relaxations and core.relaxAge.
	blockingAt, floorAt, relaxAt, relaxAgeAt int
}

// sentRestriction is a meet sent to a node: its generation and when.
type sentRestriction struct {
	gen  uint64
	sent time.Time
}

// restriction is the generation of the newest restriction the node has not realized
// (0: none).
func (n *nodeState) restriction() uint64 {
	if len(n.restrictions) == 0 {
		return 0
	}
	return n.restrictions[len(n.restrictions)-1].gen
}

// restrictionSince is when the oldest restriction the node has not realized was sent
// (the node must have one).
func (n *nodeState) restrictionSince() time.Time { return n.restrictions[0].sent }

// core is the gate's logic without goroutines: the caller serializes every call.
type core struct {
	src     cutSource
	timeout time.Duration
	gen     uint64
	nodes   map[string]*nodeState
	// adds and removes are the nodes to start and stop following at the next cut.
	adds, removes map[string]struct{}
	// cutWhileWaiting is how long a relaxation may wait before no new cut is taken until
	// it goes out: a node changed by every cut would otherwise have its relaxation put
	// off to the next epoch for as long as the changes come.
	cutWhileWaiting time.Duration
	// onHeld is told of the nodes that did not realize a restriction in time.
	onHeld func(nodes []string, gen uint64)
	// onWaited is told how long each transition's relaxations waited.
	onWaited func(time.Duration)
	// gone are the pods removed (and their addresses) that a node not held may still
	// have in the share it was sent: meets keep them (package policy, Gone). goneSince
	// says which cut removed them, so that they are forgotten once every relaxation that
	// began waiting by then has gone out (pruneGone).
	gone      policy.Gone
	goneSince []goneChunk
	// memo is the set operations of the last cut and the receivers' deltas since: every
	// node holding a set gets the same patch, meet and diff of it, computed once, and the
	// nodes share the lists (a new memo per cut, so that old lists are let go).
	memo *policy.SetMemo

	// The indexes of the nodes (index.go), kept by reindex. blocking are the nodes whose
	// restrictions hold up relaxations (some unrealized, not held), oldest restriction
	// first.
	blocking nodeQueue
	// relaxations are the nodes that are not held and wait for a relaxation (diverged is
	// not empty), lowest epoch first; relaxAge the same nodes, the one waiting longest
	// first.
	relaxations, relaxAge nodeQueue
	// floors are the nodes whose floor is neither realized nor held, oldest first;
	// floorsRealized those whose floor is realized, released together once floors is
	// empty.
	floors         nodeQueue
	floorsRealized map[*nodeState]struct{}

	// releasedAhead counts the relaxations sent while a later restriction was not
	// realized yet (TestNoWindowAcrossNodes asks whether its runs made any).
	releasedAhead int
}

// goneChunk is what one cut removed, and the gate's generation after that cut.
type goneChunk struct {
	gen  uint64
	gone policy.Gone
}

func newCore(src cutSource, base uint64, timeout time.Duration) *core {
	return &core{src: src, timeout: timeout, gen: base, cutWhileWaiting: min(time.Second, timeout/2), nodes: map[string]*nodeState{},
		adds: map[string]struct{}{}, removes: map[string]struct{}{}, onHeld: func([]string, uint64) {}, onWaited: func(time.Duration) {},
		blocking: newBlockingQueue(), relaxations: newRelaxationQueue(), relaxAge: newRelaxAgeQueue(), floors: newFloorQueue(),
		floorsRealized: map[*nodeState]struct{}{}}
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
	i := 0
	for i < len(n.restrictions) && n.restrictions[i].gen <= n.realized {
		i++
	}
	if i > 0 {
		n.restrictions = n.restrictions[i:]
		if len(n.restrictions) == 0 {
			n.restrictions, n.held = nil, false
		}
	}
	if n.floor != 0 && n.realized >= n.floor {
		n.floorRealized = true
	}
	c.reindex(n)
}

// advance moves every node as far as it may go now, and returns when it should be
// called again at the latest (zero: on the next event). Restrictions (meets) go out as
// soon as the compiler has them; a relaxation goes out once every restriction sent
// before it or with it (of its epoch or older) is realized or held, and waits for no
// later one. New cuts are taken while relaxations wait, until one has waited
// cutWhileWaiting: then none until it goes out, so that a node changed by every cut
// does not have its relaxation put off for as long as the changes come.
func (c *core) advance(now time.Time) time.Time {
	if late := c.holdLate(now); len(late) > 0 {
		c.onHeld(late, c.gen)
	}
	c.release(now)
	if oldest := c.relaxAge.front(); oldest == nil || now.Sub(oldest.relaxSince) < c.cutWhileWaiting {
		c.cut(now)
		// What the cut relaxed with no restriction before it goes out at once.
		c.release(now)
	}
	return earliest(c.deadline(), c.releaseFloors(now))
}

// holdLate holds the waiting nodes whose restriction is older than the timeout, and
// lists them.
func (c *core) holdLate(now time.Time) []string {
	var out []string
	for n := c.blocking.front(); n != nil && !now.Before(n.restrictionSince().Add(c.timeout)); n = c.blocking.front() {
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
	return n.restrictionSince().Add(c.timeout)
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

// release sends their targets to the nodes that are not held and whose relaxation no
// restriction holds up any more: those of an epoch older than the oldest unrealized
// restriction of a node that is not held. Then the gone pods that no node not held can
// have in its share any more are forgotten (pruneGone; a held node's next meet drops
// them: more than it needs to, never less). It goes through the nodes that wait for a
// relaxation in order of their epochs, not every node.
func (c *core) release(now time.Time) {
	c.releaseBefore(now, c.relaxationBound())
}

// relaxationBound is the oldest generation of a restriction that holds up relaxations:
// a relaxation of an older epoch may go (MaxUint64: none holds any up).
func (c *core) relaxationBound() uint64 {
	if n := c.blocking.front(); n != nil {
		return n.restrictions[0].gen
	}
	return math.MaxUint64
}

// releaseBefore sends their targets to the nodes whose relaxation's epoch is older than
// bound.
func (c *core) releaseBefore(now time.Time, bound uint64) {
	var gen uint64
	var waited time.Duration
	for n := c.relaxations.front(); n != nil && n.relaxEpoch < bound; n = c.relaxations.front() {
		if gen == 0 {
			c.gen++
			gen = c.gen
		}
		waited = max(waited, now.Sub(n.relaxSince))
		if bound != math.MaxUint64 {
			c.releasedAhead++
		}
		c.set(n, n.diverged, entriesOf(&n.target, n.diverged), n.target.Isolation, n.target.Pods, n.target.ClusterRules, gen)
		n.diverged = policy.NewChanges()
		c.reindex(n)
	}
	if waited > 0 {
		c.onWaited(waited)
	}
	c.pruneGone()
}

// pruneGone forgets the pods removed by cuts after which every relaxation that began
// waiting has gone out: every node not held has been sent a target without them since.
func (c *core) pruneGone() {
	first := uint64(math.MaxUint64)
	if n := c.relaxAge.front(); n != nil {
		first = n.relaxFirst
	}
	drop := 0
	for drop < len(c.goneSince) && c.goneSince[drop].gen < first {
		drop++
	}
	if drop == 0 {
		return
	}
	c.goneSince = slices.Delete(c.goneSince, 0, drop)
	c.gone = policy.Gone{}
	for _, g := range c.goneSince {
		c.gone.Merge(g.gone)
	}
}

// cut takes the compiler's changes and sends every changed node the meet of what it was
// sent and its new target.
func (c *core) cut(now time.Time) {
	add, remove := keysOf(c.adds), keysOf(c.removes)
	clear(c.adds)
	clear(c.removes)
	cut := c.src.Take(add, remove)
	if len(cut.Shares)+len(cut.Deltas)+len(remove)+len(cut.Gone.Pods)+len(cut.Gone.Addresses) == 0 {
		// Nothing changed: the memo stays, so that the receivers' deltas of the last
		// change still share their patches (cuts come after most reports).
		return
	}
	c.gone.Merge(cut.Gone)
	c.memo = policy.NewSetMemo()
	// waited: the nodes of the cut's deltas whose relaxation was waiting before it.
	waited := map[*nodeState]bool{}
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
		waited[n] = *c.relaxAge.place(n) != 0
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
		if n.realized < g {
			n.restrictions = append(n.restrictions, sentRestriction{gen: g, sent: now})
		}
		n.diverged = diverged(&n.sent, &n.target, n.diverged, c.memo)
		c.reindex(n)
	}
	// Every node the cut left waiting for a relaxation waits for the cut's restrictions
	// and every one before: its epoch is the gate's generation now.
	for n, was := range waited {
		if n.diverged.Empty() {
			continue
		}
		if !was {
			n.relaxFirst, n.relaxSince = c.gen, now
		}
		n.relaxEpoch = c.gen
		c.reindex(n)
	}
	if len(cut.Gone.Pods)+len(cut.Gone.Addresses) > 0 {
		c.goneSince = append(c.goneSince, goneChunk{gen: c.gen, gone: cut.Gone})
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
