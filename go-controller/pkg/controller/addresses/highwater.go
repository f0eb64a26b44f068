package addresses

import (
	"context"
	"fmt"
	"sync"

	log "github.com/sirupsen/logrus"

	"github.com/kovs-net/kovs/go-controller/pkg/controller/ipam"
)

// highWaterAhead is how far ahead of use kovs-controller records a block's high water:
// one Node write per this many never-used addresses handed out, and none for a new node's
// first ones (the node reconciler records them with the node's blocks). A restart then
// treats at most that many never-used addresses as freed.
const highWaterAhead = 16

// highWaterToRecord returns node's high-water record when some block handed out an
// address above what the Node records (or the Node records nothing yet for it): the
// record to write before that address is recorded on its pod. With fresh, a block with no
// record and nothing handed out gets one ahead of its first addresses too. ok is false
// when the Node's record already covers every address handed out (and, with fresh, every
// block has a record).
func (a *Allocator) highWaterToRecord(node string, fresh bool) (ipam.HighWater, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	pools, ok := a.pools[node]
	if !ok {
		return nil, false
	}
	recorded := a.highWater[node]
	next := ipam.HighWater{}
	stale := false
	for _, pool := range pools.Pools() {
		hw, handed := pool.HighWater()
		mark, has := recorded[pool.Block()]
		switch {
		case has && (!handed || hw.Compare(mark) <= 0):
			next[pool.Block()] = mark
		case !handed && !fresh:
		default:
			next[pool.Block()] = pool.HighWaterAhead(highWaterAhead)
			stale = true
		}
	}
	return next, stale
}

// recordLock returns node's lock of its high-water writes: two workers never race a lower
// record over a higher, and a worker whose address a write in flight covers waits for it.
func (a *Allocator) recordLock(node string) *sync.Mutex {
	a.mu.Lock()
	defer a.mu.Unlock()
	l, ok := a.recordLocks[node]
	if !ok {
		l = &sync.Mutex{}
		a.recordLocks[node] = l
	}
	return l
}

// recorded notes what node's Node now records.
func (a *Allocator) recorded(node string, hw ipam.HighWater) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if _, ok := a.pools[node]; ok {
		a.highWater[node] = hw
	}
}

// restoreHighWater applies node's recorded high water to its pools after a restart.
func (a *Allocator) restoreHighWater(node string, hw ipam.HighWater) {
	a.mu.Lock()
	defer a.mu.Unlock()
	pools, ok := a.pools[node]
	if !ok {
		return
	}
	kept := ipam.HighWater{}
	for _, pool := range pools.Pools() {
		mark, ok := hw[pool.Block()]
		if !ok {
			continue
		}
		if err := pool.RestoreHighWater(mark); err != nil {
			log.WithField("node", node).WithError(err).Warn("recorded address high water not restored")
			continue
		}
		kept[pool.Block()] = mark
	}
	a.highWater[node] = kept
}

// recordHighWater writes node's high water on the Node when the addresses just handed out
// passed it. Only the writes of one node are serialized (recordLock); a worker whose
// address the record already covers takes no lock at all.
func (r *PodReconciler) recordHighWater(ctx context.Context, node string) error {
	a := r.Alloc
	if _, stale := a.highWaterToRecord(node, false); !stale {
		return nil
	}
	l := a.recordLock(node)
	l.Lock()
	defer l.Unlock()
	hw, stale := a.highWaterToRecord(node, false)
	if !stale {
		return nil // a write that covers this address landed meanwhile
	}
	value := hw.Annotation()
	if err := patchAnnotations(ctx, r.Client.CoreV1().Nodes(), node, map[string]string{ipam.HighWaterAnnotationKey: value}); err != nil {
		return fmt.Errorf("record the address high water of node %s: %w", node, err)
	}
	a.recorded(node, hw)
	log.WithField("node", node).WithField("highWater", value).Debug("address high water recorded")
	return nil
}
