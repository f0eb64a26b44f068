package transition

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/kovs-net/kovs/go-controller/pkg/controller/networkpolicy"
	"github.com/kovs-net/kovs/go-controller/pkg/policy"
)

// The core's indexes of its nodes are what a scan of every node finds, after every step
// of random sequences of cuts (nodes added and removed, shares that restrict, relax or
// change nothing), reports of any generation, and advances far enough apart that
// restrictions and floors time out. Each advance holds the nodes a scan finds late, and
// asks to be called again at the earliest timeout a scan finds: what advance did when it
// scanned every node itself.
func TestIndexesFollowTheNodes(t *testing.T) {
	const runs, steps = 200, 300
	for run := range runs {
		rng := rand.New(rand.NewPCG(1, uint64(run)))
		src := &randomSource{rng: rng, gens: map[string]uint64{}}
		c := newCore(src, 100, 10*time.Second)
		var held int
		var heldNow [][]string
		c.onHeld = func(nodes []string, _ uint64) {
			held += len(nodes)
			heldNow = append(heldNow, nodes)
		}
		now := time.Unix(1000, 0)
		names := make([]string, 12)
		for i := range names {
			names[i] = fmt.Sprint("node-", i)
		}
		for step := range steps {
			var what string
			switch k := rng.IntN(10); {
			case k < 2:
				// As Watch does, only a node the gate does not follow is added.
				name := names[rng.IntN(len(names))]
				if _, ok := c.nodes[name]; ok {
					continue
				}
				what = "add " + name
				c.adds[name] = struct{}{}
				delete(c.removes, name)
			case k < 3:
				name := names[rng.IntN(len(names))]
				what = "remove " + name
				c.removes[name] = struct{}{}
				delete(c.adds, name)
			case k < 6:
				followed := keysOf(setOf(c.nodes))
				if len(followed) == 0 {
					continue
				}
				name := followed[rng.IntN(len(followed))]
				n := c.nodes[name]
				// The latest generation sent, the restriction, or an older one.
				gen := []uint64{n.sent.Generation, n.restriction(), n.floor, c.gen - uint64(rng.IntN(5))}[rng.IntN(4)]
				what = fmt.Sprintf("report %s at %d", name, gen)
				c.realized(name, gen)
			default:
				now = now.Add(time.Duration(rng.IntN(6000)) * time.Millisecond)
				what = "advance to " + now.String()
				late, lateFloors := c.scanLate(now)
				heldNow = nil
				next := c.advance(now)
				// The nodes its cut let go, if it took one, are not held.
				lateFloors = slices.DeleteFunc(lateFloors, func(name string) bool { _, ok := c.nodes[name]; return !ok })
				if want := slices.DeleteFunc([][]string{late, lateFloors}, func(l []string) bool { return len(l) == 0 }); !slices.EqualFunc(heldNow, want, slices.Equal) {
					t.Fatalf("run %d, step %d (%s): held %v, want %v", run, step, what, heldNow, want)
				}
				if want := c.scanNext(); !next.Equal(want) {
					t.Fatalf("run %d, step %d (%s): advance asks to be called at %s, want %s", run, step, what, next, want)
				}
			}
			if err := c.checkIndexes(); err != nil {
				t.Fatalf("run %d, step %d (%s): %v", run, step, what, err)
			}
		}
		if run == 0 {
			t.Logf("run 0: %d nodes followed, %d held, generation %d", len(c.nodes), held, c.gen)
		}
	}
}

// scanLate lists, by a scan of every node, the nodes an advance at now holds: those whose
// restriction holds up the relaxations and timed out, then those whose floor timed out
// (but for the nodes its cut lets go, if it takes one).
func (c *core) scanLate(now time.Time) (restrictions, floors []string) {
	for name, n := range c.nodes {
		if len(n.restrictions) != 0 && !n.held && !now.Before(n.restrictionSince().Add(c.timeout)) {
			restrictions = append(restrictions, name)
		}
		if n.floor != 0 && !n.floorRealized && !n.floorHeld && !now.Before(n.floorSince.Add(c.timeout)) {
			floors = append(floors, name)
		}
	}
	slices.Sort(restrictions)
	slices.Sort(floors)
	return restrictions, floors
}

// scanNext is, by a scan of every node, when an advance that just returned asks to be
// called again: the earliest timeout of a restriction that holds up the relaxations or
// of a floor neither realized nor held.
func (c *core) scanNext() time.Time {
	var next time.Time
	for _, n := range c.nodes {
		if len(n.restrictions) != 0 && !n.held {
			next = earliest(next, n.restrictionSince().Add(c.timeout))
		}
		if n.floor != 0 && !n.floorRealized && !n.floorHeld {
			next = earliest(next, n.floorSince.Add(c.timeout))
		}
	}
	return next
}

// checkIndexes compares every index of c with a scan of its nodes.
func (c *core) checkIndexes() error {
	var errs []error
	in := func(set map[*nodeState]struct{}, n *nodeState) bool { _, ok := set[n]; return ok }
	queued := func(q *nodeQueue, n *nodeState) bool { return *q.place(n) != 0 }
	counts := map[string]int{}
	for name, n := range c.nodes {
		if n.name != name {
			errs = append(errs, fmt.Errorf("node %s is named %s", name, n.name))
		}
		for _, x := range []struct {
			index     string
			want, got bool
		}{
			{"blocking", len(n.restrictions) != 0 && !n.held, queued(&c.blocking, n)},
			{"relaxations", !n.held && !n.diverged.Empty(), queued(&c.relaxations, n)},
			{"relaxAge", !n.held && !n.diverged.Empty(), queued(&c.relaxAge, n)},
			{"floors", n.floor != 0 && !n.floorRealized && !n.floorHeld, queued(&c.floors, n)},
			{"floorsRealized", n.floor != 0 && n.floorRealized, in(c.floorsRealized, n)},
		} {
			if x.want != x.got {
				errs = append(errs, fmt.Errorf("node %s (restriction %d, held %t, diverged %t, floor %d, realized %t, held %t): in %s %t, want %t",
					name, n.restriction(), n.held, !n.diverged.Empty(), n.floor, n.floorRealized, n.floorHeld, x.index, x.got, x.want))
			}
			if x.want {
				counts[x.index]++
			}
		}
	}
	// Every node indexed is followed: no node the gate let go, or replaced, is left.
	for _, x := range []struct {
		index string
		got   int
	}{{"blocking", c.blocking.Len()}, {"relaxations", c.relaxations.Len()}, {"relaxAge", c.relaxAge.Len()}, {"floors", c.floors.Len()},
		{"floorsRealized", len(c.floorsRealized)}} {
		if x.got != counts[x.index] {
			errs = append(errs, fmt.Errorf("%s has %d nodes, want %d", x.index, x.got, counts[x.index]))
		}
	}
	for _, q := range []struct {
		name  string
		queue *nodeQueue
	}{{"blocking", &c.blocking}, {"relaxations", &c.relaxations}, {"relaxAge", &c.relaxAge}, {"floors", &c.floors}} {
		for i, n := range q.queue.nodes {
			if *q.queue.place(n) != i+1 {
				errs = append(errs, fmt.Errorf("%s: node %s at %d thinks it is at %d", q.name, n.name, i, *q.queue.place(n)-1))
			}
			if i > 0 && q.queue.Less(i, (i-1)/2) {
				errs = append(errs, fmt.Errorf("%s: node %s at %d comes before its parent", q.name, n.name, i))
			}
		}
	}
	return errors.Join(errs...)
}

// randomSource is a compiler whose every node has one pod, isolated at random: each cut
// changes the isolation of some of the nodes it follows (to more, less, or the same).
type randomSource struct {
	rng  *rand.Rand
	gens map[string]uint64
}

func (s *randomSource) isolation(name string) policy.Isolation {
	pod := []policy.PodKey{{Namespace: "x", Name: name, UID: name}}
	var iso policy.Isolation
	if s.rng.IntN(2) == 0 {
		iso.Ingress = pod
	}
	if s.rng.IntN(2) == 0 {
		iso.Egress = pod
	}
	return iso
}

func (s *randomSource) Take(add, remove []string) networkpolicy.Cut {
	cut := networkpolicy.Cut{Shares: map[string]policy.NodeShare{}, Deltas: map[string]policy.Delta{}}
	for _, name := range remove {
		delete(s.gens, name)
	}
	for _, name := range keysOf(setOf(s.gens)) {
		if s.rng.IntN(3) != 0 {
			continue
		}
		iso := s.isolation(name)
		cut.Deltas[name] = policy.Delta{Node: name, FromGeneration: s.gens[name], Generation: s.gens[name] + 1, Isolation: &iso}
		s.gens[name]++
	}
	for _, name := range add {
		share := policy.NewNodeShare(name)
		share.Generation, share.Pods, share.Isolation = 1, []policy.PodKey{{Namespace: "x", Name: name, UID: name}}, s.isolation(name)
		cut.Shares[name] = share
		s.gens[name] = 1
	}
	return cut
}
