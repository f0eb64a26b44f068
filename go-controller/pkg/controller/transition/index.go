package transition

import (
	"container/heap"
)

// The core's indexes follow the fields of its nodes that advance looks for (a restriction
// not held, a relaxation not held, a floor), so that advance, which runs after every
// agent's report, costs what changed and not a scan of every node: at 5,000 nodes a
// change that reaches them all is 5,000 reports, each of which scanned all 5,000 nodes
// several times under the gate's lock, which the nodes' streams need too.

// reindex puts n in the indexes its fields say it belongs in, and takes it out of the
// others. Whatever changes restrictions, held, diverged, relaxEpoch, floor, floorRealized
// or floorHeld calls it before it returns.
func (c *core) reindex(n *nodeState) {
	c.blocking.set(n, len(n.restrictions) != 0 && !n.held)
	relaxing := !n.held && !n.diverged.Empty()
	c.relaxations.set(n, relaxing)
	c.relaxAge.set(n, relaxing)
	c.floors.set(n, n.floor != 0 && !n.floorRealized && !n.floorHeld)
	setIf(c.floorsRealized, n, n.floor != 0 && n.floorRealized)
}

// unindex takes n out of every index: the gate stops following it.
func (c *core) unindex(n *nodeState) {
	c.blocking.set(n, false)
	c.relaxations.set(n, false)
	c.relaxAge.set(n, false)
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

// nodeQueue is a min-heap of nodes by a generation or time of theirs, where each node
// keeps its place so that it leaves or moves in O(log n): the nodes due are taken from
// the front.
type nodeQueue struct {
	nodes []*nodeState
	// less orders the nodes (only by what the queue is of: nodes that tie may come in
	// any order).
	less func(a, b *nodeState) bool
	// place is where the node keeps its index in nodes plus one (0: not queued).
	place func(*nodeState) *int
}

// newBlockingQueue queues the nodes whose restriction holds up relaxations by their
// oldest unrealized restriction: its generation, and so its time (generations are
// handed out in time order), so that the front both times out first and bounds the
// relaxations that may go.
func newBlockingQueue() nodeQueue {
	return nodeQueue{less: func(a, b *nodeState) bool { return a.restrictions[0].gen < b.restrictions[0].gen },
		place: func(n *nodeState) *int { return &n.blockingAt }}
}

func newFloorQueue() nodeQueue {
	return nodeQueue{less: func(a, b *nodeState) bool { return a.floorSince.Before(b.floorSince) },
		place: func(n *nodeState) *int { return &n.floorAt }}
}

// newRelaxationQueue queues the nodes waiting for a relaxation by its epoch: the front
// goes first.
func newRelaxationQueue() nodeQueue {
	return nodeQueue{less: func(a, b *nodeState) bool { return a.relaxEpoch < b.relaxEpoch },
		place: func(n *nodeState) *int { return &n.relaxAt }}
}

// newRelaxAgeQueue queues the same nodes by when their relaxation began waiting: the
// front is the one waiting longest.
func newRelaxAgeQueue() nodeQueue {
	return nodeQueue{less: func(a, b *nodeState) bool { return a.relaxFirst < b.relaxFirst },
		place: func(n *nodeState) *int { return &n.relaxAgeAt }}
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

// Less is the queue's order: the order of nodes that tie does not matter (holdLate sorts
// the nodes it holds), and the nodes of one cut all tie, so a node leaves the queue with
// few comparisons.
func (q *nodeQueue) Less(i, j int) bool { return q.less(q.nodes[i], q.nodes[j]) }

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
