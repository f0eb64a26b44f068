package harness

import (
	"slices"
	"sync"
	"time"
)

// policyChange is one NetworkPolicy creation or deletion being realized: it is done when
// every node it concerns holds the policy's rules (creation) or none of them (deletion).
type policyChange struct {
	policy   policyKey
	sel      selector
	create   bool
	start    time.Time
	waiting  map[string]bool
	realized time.Time // the last concerned node's
	seen     time.Time // when the harness's own watch delivered the change
	done     chan struct{}
	lost     []string // nodes that had not realized it by the deadline
	// applied is, per concerned node, when it applied the change and in which
	// generation of its share.
	applied  []nodeApplied
	lastNode string
}

// nodeApplied is one node's application of a change.
type nodeApplied struct {
	node       string
	generation uint64
	at         time.Time
}

// realizationTracker matches what the agents observe to the changes the harness made.
type realizationTracker struct {
	mu      sync.Mutex
	pending map[policyKey][]*policyChange
	latency Durations
	lost    int // changes some concerned node had not realized by the deadline
	noNode  int // changes that concerned no node
	// superseded counts creations deleted again before every concerned node had them:
	// the controller may rightly never send them.
	superseded int
	deadline   time.Duration
	split      PolicySplit
	// finished are the changes realized since the last finishedResults, for the split at
	// kovs-controller's receipt (receipts.go).
	finished []finishedChange
}

// finishedChange is a realized change: before its write, and its last concerned node's
// realization.
type finishedChange struct {
	policy          policyKey
	create          bool
	start, realized time.Time
	tail            NodeTail
	applied         []nodeApplied
}

// NodeTail is when the nodes a change concerned applied it, from before its write: a
// change late on every node and one late on a single node have the same realization time
// and different causes.
type NodeTail struct {
	Create                      bool
	Nodes                       int
	P50, P90, P99, Second, Last time.Duration
	LastNode                    string
	// Reconnected counts the agents that took a snapshot while the change was pending
	// (a new stream), filled in by the phase that made the change.
	Reconnected int
}

func (c *policyChange) tail() NodeTail {
	d := make(Durations, len(c.applied))
	for i, a := range c.applied {
		d[i] = a.at.Sub(c.start)
	}
	t := NodeTail{Create: c.create, Nodes: len(d), P50: d.Percentile(50), P90: d.Percentile(90),
		P99: d.Percentile(99), Last: d.Max(), LastNode: c.lastNode}
	if n := len(d); n > 1 {
		slices.Sort(d)
		t.Second = d[n-2]
	}
	return t
}

// PolicySplit is where a sample of policy changes spent their time, as far as the harness
// can see it from outside kovs-controller: the write's answer, and its own watch of
// NetworkPolicies (on the same kube-apiserver as the controller's informer) delivering the
// change, each from before the write; and from that delivery to the last concerned agent
// applying the change, which is what kovs-controller and the policy stream take (give or
// take the two watches' difference).
type PolicySplit struct {
	Answered, Seen, AfterSeen Durations
	// RealizedUnseen counts changes realized before the harness's watch delivered them.
	RealizedUnseen int
}

func newRealizationTracker(deadline time.Duration) *realizationTracker {
	return &realizationTracker{pending: map[policyKey][]*policyChange{}, deadline: deadline}
}

// expect registers a change before it is written: nodes are those it concerns. A
// deletion waits only on nodes that hold the policy now (holds).
func (t *realizationTracker) expect(p policyKey, sel selector, create bool, nodes []string, holds func(node string) bool) *policyChange {
	c := &policyChange{policy: p, sel: sel, create: create, start: time.Now(), waiting: map[string]bool{}, done: make(chan struct{})}
	t.mu.Lock()
	defer t.mu.Unlock()
	if !create {
		for _, old := range append([]*policyChange(nil), t.pending[p]...) {
			if old.create {
				t.superseded++
				t.remove(old)
			}
		}
	}
	for _, n := range nodes {
		if create || holds(n) {
			c.waiting[n] = true
		}
	}
	if len(c.waiting) == 0 {
		t.noNode++
		close(c.done)
		return c
	}
	t.pending[p] = append(t.pending[p], c)
	return c
}

// answered records that the write of c was answered at.
func (t *realizationTracker) answered(c *policyChange, at time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.split.Answered = append(t.split.Answered, at.Sub(c.start))
}

// seen records that the harness's watch delivered the creation (or deletion) of p at: it
// belongs to the oldest change of p of that kind still pending that no delivery has
// matched yet.
func (t *realizationTracker) seen(p policyKey, create bool, at time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, c := range t.pending[p] {
		if c.create == create && c.seen.IsZero() && !at.Before(c.start) {
			c.seen = at
			t.split.Seen = append(t.split.Seen, at.Sub(c.start))
			return
		}
	}
}

// splitResults returns where the changes since the last results spent their time, and
// starts a new sample.
func (t *realizationTracker) splitResults() PolicySplit {
	t.mu.Lock()
	defer t.mu.Unlock()
	s := t.split
	t.split = PolicySplit{}
	return s
}

// cancel forgets a change whose write failed.
func (t *realizationTracker) cancel(c *policyChange) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.remove(c)
}

func (t *realizationTracker) remove(c *policyChange) {
	list := t.pending[c.policy]
	for i, o := range list {
		if o == c {
			t.pending[c.policy] = append(list[:i:i], list[i+1:]...)
			select {
			case <-c.done:
			default:
				close(c.done)
			}
			break
		}
	}
	if len(t.pending[c.policy]) == 0 {
		delete(t.pending, c.policy)
	}
}

func (t *realizationTracker) observe(node string, p policyKey, present bool, at time.Time, generation uint64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, c := range t.pending[p] {
		if c.create != present || !c.waiting[node] || at.Before(c.start) {
			continue
		}
		delete(c.waiting, node)
		c.applied = append(c.applied, nodeApplied{node, generation, at})
		if at.After(c.realized) {
			c.realized, c.lastNode = at, node
		}
		t.finishIfDone(c)
		return
	}
}

func (t *realizationTracker) finishIfDone(c *policyChange) {
	if len(c.waiting) > 0 {
		return
	}
	if !c.realized.IsZero() {
		t.latency = append(t.latency, c.realized.Sub(c.start))
		t.finished = append(t.finished, finishedChange{policy: c.policy, create: c.create, start: c.start, realized: c.realized, tail: c.tail(), applied: c.applied})
		if c.seen.IsZero() {
			t.split.RealizedUnseen++
		} else {
			t.split.AfterSeen = append(t.split.AfterSeen, c.realized.Sub(c.seen))
		}
	} else {
		t.noNode++
	}
	t.remove(c)
}

// sweep drops, from creations, the nodes that no longer host a pod the policy selects
// (the churn deleted them: they will never hold its rules), and gives up on changes older
// than the deadline.
func (t *realizationTracker) sweep(now time.Time, hosts func(node string, sel selector) bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, list := range t.pending {
		for _, c := range append([]*policyChange(nil), list...) {
			if c.create {
				for n := range c.waiting {
					if !hosts(n, c.sel) {
						delete(c.waiting, n)
					}
				}
			}
			if len(c.waiting) > 0 && now.Sub(c.start) > t.deadline {
				for n := range c.waiting {
					c.lost = append(c.lost, n)
				}
				t.lost++
				t.remove(c)
				continue
			}
			t.finishIfDone(c)
		}
	}
}

// pendingCount is how many changes wait.
func (t *realizationTracker) pendingCount() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	n := 0
	for _, list := range t.pending {
		n += len(list)
	}
	return n
}

// results returns the latencies of the realized changes and the counts of lost changes
// and changes concerning no node, and starts a new sample.
func (t *realizationTracker) results() (Durations, int, int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	d, lost, none := t.latency, t.lost, t.noNode
	t.latency, t.lost, t.noNode, t.superseded, t.split = nil, 0, 0, 0, PolicySplit{}
	return d, lost, none
}

// finishedResults returns the changes realized since the last call and starts anew.
func (t *realizationTracker) finishedResults() []finishedChange {
	t.mu.Lock()
	defer t.mu.Unlock()
	f := t.finished
	t.finished = nil
	return f
}

// supersededCount is how many creations were deleted before they were realized.
func (t *realizationTracker) supersededCount() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.superseded
}

// allocationTracker times pod creation (before the Create call) to its address allocated
// on its node (the hollow node's CNI ADD, when the harness's pod informer delivers the
// pod), and apart from it, the Create call's answer to the allocation: kovs's part, with
// the watch's delivery (zero when the node allocated before the answer came back). The
// total splits into the delivery (the Create call to the node's informer handing the pod
// over: kube-apiserver and this harness, what any plugin that allocates on the node waits
// for) and kovs's part on the node (that hand-over to the address allocated).
type allocationTracker struct {
	mu          sync.Mutex
	started     map[podRef]time.Time
	answered    map[podRef]time.Time
	latency     Durations
	afterCreate Durations
	delivery    Durations
	onNode      Durations
	// deletedFirst counts pods deleted before their address was seen (no sample).
	deletedFirst int
	last         time.Time // the last address seen
}

func newAllocationTracker() *allocationTracker {
	return &allocationTracker{started: map[podRef]time.Time{}, answered: map[podRef]time.Time{}}
}

func (t *allocationTracker) creating(ref podRef) {
	t.mu.Lock()
	t.started[ref] = time.Now()
	t.mu.Unlock()
}

// created notes when the pod's Create call was answered.
func (t *allocationTracker) created(ref podRef) {
	t.mu.Lock()
	if _, ok := t.started[ref]; ok {
		t.answered[ref] = time.Now()
	}
	t.mu.Unlock()
}

func (t *allocationTracker) failed(ref podRef) {
	t.mu.Lock()
	delete(t.started, ref)
	delete(t.answered, ref)
	t.mu.Unlock()
}

// deleted forgets a pod deleted before its address was seen.
func (t *allocationTracker) deleted(ref podRef) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if _, ok := t.started[ref]; ok {
		delete(t.started, ref)
		delete(t.answered, ref)
		t.deletedFirst++
	}
}

// allocated notes a pod's address allocated at at by its node, which was handed the pod
// (or tried again) at delivered.
func (t *allocationTracker) allocated(ref podRef, delivered, at time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if start, ok := t.started[ref]; ok {
		t.latency = append(t.latency, at.Sub(start))
		t.delivery = append(t.delivery, max(0, delivered.Sub(start)))
		t.onNode = append(t.onNode, at.Sub(delivered))
		delete(t.started, ref)
		t.last = at
		answered, ok := t.answered[ref]
		delete(t.answered, ref)
		if !ok || answered.After(at) {
			answered = at // allocated before the Create call's answer reached the harness
		}
		t.afterCreate = append(t.afterCreate, at.Sub(answered))
	}
}

// results returns the latencies so far, how many pods still wait and how many were
// deleted before their address was seen, and starts anew.
func (t *allocationTracker) results() (Durations, int, int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	d, waiting, deleted := t.latency, len(t.started), t.deletedFirst
	t.latency, t.deletedFirst = nil, 0
	return d, waiting, deleted
}

// afterCreateResults returns the samples of the Create call's answer to the allocation so
// far and starts anew (call it with results).
func (t *allocationTracker) afterCreateResults() Durations {
	t.mu.Lock()
	defer t.mu.Unlock()
	d := t.afterCreate
	t.afterCreate = nil
	return d
}

// splitResults returns the samples of the Create call to the node's delivery and of the
// delivery to the address so far, and starts anew (call it with results).
func (t *allocationTracker) splitResults() (delivery, onNode Durations) {
	t.mu.Lock()
	defer t.mu.Unlock()
	delivery, onNode = t.delivery, t.onNode
	t.delivery, t.onNode = nil, nil
	return delivery, onNode
}

// waiting is how many created pods have no address seen yet.
func (t *allocationTracker) waiting() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.started)
}

// lastAllocation is when the last timed pod's address was seen.
func (t *allocationTracker) lastAllocation() time.Time {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.last
}
