package transition

import (
	"container/heap"
	"time"
)

// The core's indexes follow the fields of its nodes that advance looks for (a restriction
// not held, a relaxation not held, a floor), so that advance, which runs after every
// agent's report, costs what changed and not a scan of every node: at 5,000 nodes a
// change that reaches them all is 5,000 reports, each of which scanned all 5,000 nodes
// several times under the gate's lock, which the nodes' streams need too.

// reindex puts n in the indexes its fields say it belongs in, and takes it out of the
// others. Whatever changes restriction, held, diverged, floor, floorRealized or floorHeld
// calls it before it returns.
func (c *core) reindex(n *nodeState) {
	c.blocking.set(n, n.restriction != 0 && !n.held)
	setIf(c.toRelease, n, !n.held && !n.diverged.Empty())
	c.floors.set(n, n.floor != 0 && !n.floorRealized && !n.floorHeld)
	setIf(c.floorsRealized, n, n.floor != 0 && n.floorRealized)
}

// unindex takes n out of every index: the gate stops following it.
func (c *core) unindex(n *nodeState) {
	c.blocking.set(n, false)
	delete(c.toRelease, n)
	c.floors.set(n, false)
	delete(c.floorsRealized, n)
}

func setIf(set map[*nodeState]struct{}, n *nodeState, in bool) {
	if in {
		set[n] = struct{}{}
	} else {
		delete(set, n)
	}
}

// nodeQueue is a min-heap of nodes by a time of theirs (when their restriction or floor
// was sent), oldest first, where each node keeps its place so that it leaves or moves in
// O(log n): the nodes that timed out are taken from the front, and the next deadline is
// the front's.
type nodeQueue struct {
	nodes []*nodeState
	// since is the time a node is queued by.
	since func(*nodeState) time.Time
	// place is where the node keeps its index in nodes plus one (0: not queued).
	place func(*nodeState) *int
}

func newBlockingQueue() nodeQueue {
	return nodeQueue{since: func(n *nodeState) time.Time { return n.restrictionSince },
		place: func(n *nodeState) *int { return &n.blockingAt }}
}

func newFloorQueue() nodeQueue {
	return nodeQueue{since: func(n *nodeState) time.Time { return n.floorSince },
		place: func(n *nodeState) *int { return &n.floorAt }}
}

// set queues n (or moves it to where its time now puts it) when in, and takes it out
// otherwise.
func (q *nodeQueue) set(n *nodeState, in bool) {
	at := *q.place(n)
	switch {
	case in && at == 0:
		heap.Push(q, n)
	case in:
		heap.Fix(q, at-1)
	case at != 0:
		heap.Remove(q, at-1)
	}
}

// front is the node queued longest (nil: none).
func (q *nodeQueue) front() *nodeState {
	if len(q.nodes) == 0 {
		return nil
	}
	return q.nodes[0]
}

// The methods of heap.Interface; use set and front.

func (q *nodeQueue) Len() int { return len(q.nodes) }

// Less orders the nodes by time alone: the order of nodes of one time does not matter
// (holdLate sorts the nodes it holds), and the nodes of one cut all have its time, so a
// node leaves the queue with few comparisons.
func (q *nodeQueue) Less(i, j int) bool {
	return q.since(q.nodes[i]).Before(q.since(q.nodes[j]))
}

func (q *nodeQueue) Swap(i, j int) {
	q.nodes[i], q.nodes[j] = q.nodes[j], q.nodes[i]
	*q.place(q.nodes[i]) = i + 1
	*q.place(q.nodes[j]) = j + 1
}

func (q *nodeQueue) Push(x any) {
	n := x.(*nodeState)
	q.nodes = append(q.nodes, n)
	*q.place(n) = len(q.nodes)
}

func (q *nodeQueue) Pop() any {
	last := len(q.nodes) - 1
	n := q.nodes[last]
	q.nodes[last] = nil
	q.nodes = q.nodes[:last]
	*q.place(n) = 0
	return n
}
