package addresses

import (
	"context"
	"fmt"

	log "github.com/sirupsen/logrus"

	"github.com/kovs-net/kovs/go-controller/pkg/controller/ipam"
)

// highWaterAhead is how far past a block's high water kovs-controller records it: one
// Node write per this many never-used addresses handed out. A restart then treats at most
// that many never-used addresses as freed.
const highWaterAhead = 16

// highWaterToRecord returns node's high-water record when some block handed out an
// address above what the Node records (or the Node records nothing yet for it): the
// record to write before that address is recorded on its pod. ok is false when the Node's
// record already covers every address handed out.
func (a *Allocator) highWaterToRecord(node string) (ipam.HighWater, bool) {
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
		case !handed && has:
			next[pool.Block()] = mark
		case !handed:
		case has && hw.Compare(mark) <= 0:
			next[pool.Block()] = mark
		default:
			ahead, _ := pool.HighWaterAhead(highWaterAhead)
			next[pool.Block()] = ahead
			stale = true
		}
	}
	return next, stale
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
// passed it. Writes are serialized: two workers never race a lower record over a higher.
func (r *PodReconciler) recordHighWater(ctx context.Context, node string) error {
	a := r.Alloc
	a.highWaterMu.Lock()
	defer a.highWaterMu.Unlock()
	hw, stale := a.highWaterToRecord(node)
	if !stale {
		return nil
	}
	value := hw.Annotation()
	if err := patchAnnotation(ctx, r.Client.CoreV1().Nodes(), node, ipam.HighWaterAnnotationKey, value); err != nil {
		return fmt.Errorf("record the address high water of node %s: %w", node, err)
	}
	a.mu.Lock()
	a.highWater[node] = hw
	a.mu.Unlock()
	log.WithField("node", node).WithField("highWater", value).Debug("address high water recorded")
	return nil
}
