package networkpolicy

import (
	"fmt"
	"math/rand/v2"
	"reflect"
	"testing"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/kovs-net/kovs/go-controller/pkg/growth"
	"github.com/kovs-net/kovs/go-controller/pkg/policy"
)

// feedTakes is how many Takes BenchmarkFeedTakeIdleGrowth measures per run.
const feedTakes = 2000

// BenchmarkFeedTakeIdleGrowth grows the nodes a Feed follows while nothing changes: n
// nodes of five pods each under one policy, every node followed, and the work is Takes
// that add and remove nothing, as the transition gate makes after an agent's report. A
// Take costs what is pending, not the nodes followed: the ratio reads about 1 (the same
// work at 2n), where a scan of every subscriber per Take reads about 2.
func BenchmarkFeedTakeIdleGrowth(b *testing.B) {
	one, two := growth.Ratio2x(b, 2000, func(n int) func() {
		c := newGrowthCluster(n)
		for i := range 5 * n {
			p := c.pod("wide", fmt.Sprint("pod-", i), map[string]string{"app": "wide"})
			c.m.setPod(podKey(p), p)
		}
		np := c.g.policy("wide", "np", map[string]string{"app": "wide"}, map[string]string{"app": "wide"})
		c.m.setPolicy(objectKey(np), np)
		c.m.commit()
		f := (&Compiler{model: c.m}).newFeed(func() {})
		nodes := make([]string, n)
		for i := range nodes {
			nodes[i] = fmt.Sprint("node-", i)
		}
		f.Take(nodes, nil)
		return func() {
			for range feedTakes {
				if cut := f.Take(nil, nil); len(cut.Deltas) > 0 {
					b.Fatalf("an idle Take returned %d deltas", len(cut.Deltas))
				}
			}
		}
	})
	b.ReportMetric(float64(one.CPU.Nanoseconds())/feedTakes, "ns/take-1x")
	b.ReportMetric(float64(two.CPU.Nanoseconds())/feedTakes, "ns/take-2x")
}

// TestFeedTakeEqualsScan runs random sequences of namespace, pod and policy events in
// random batches, with Takes of random nodes to add and remove between batches (none,
// one or several), on two feeds of one model: one takes its cut with Take, which looks
// at the subscribers in its behind set only, the other with a scan of every subscriber it
// follows, as Take did before the set. The cuts must be the same, and after every Take
// no subscriber left out of the cut may have anything to take: a commit that forgot to
// put a subscriber in the set would leave its changes behind until its next change.
// Subscribers of Watch (no set) on the same nodes take their deltas now and then, to
// check that they stay out of the feed's set.
func TestFeedTakeEqualsScan(t *testing.T) {
	seeds := 100
	if testing.Short() {
		seeds = 20
	}
	for seed := range seeds {
		r := &randomCluster{rng: rand.New(rand.NewPCG(uint64(seed), 11)), ns: map[string]*corev1.Namespace{},
			pods: map[types.NamespacedName]*corev1.Pod{}, policies: map[types.NamespacedName]*networkingv1.NetworkPolicy{}}
		if !t.Run(fmt.Sprint("seed-", seed), r.runFeeds) {
			return
		}
	}
}

func (r *randomCluster) runFeeds(t *testing.T) {
	c := &Compiler{model: newModel()}
	f, ref := c.newFeed(func() {}), c.newFeed(func() {})
	var watched []*subscriber
	nodes := []string{"node-0", "node-1", "node-2", "node-3", "node-4"}
	someNodes := func() []string {
		var out []string
		for _, n := range nodes {
			if r.rng.IntN(4) == 0 {
				out = append(out, n)
			}
		}
		return out
	}
	for batch := 0; batch < 40; batch++ {
		c.mu.Lock()
		for range 1 + r.rng.IntN(6) {
			r.event(c.model)
		}
		c.model.commit()
		if r.rng.IntN(5) == 0 {
			s, _ := c.model.subscribe(r.pick(nodes...))
			watched = append(watched, s)
		}
		for _, s := range watched {
			if r.rng.IntN(3) == 0 {
				c.model.delta(s)
			}
		}
		c.mu.Unlock()
		for range r.rng.IntN(3) {
			add, remove := someNodes(), someNodes()
			cut := f.Take(add, remove)
			want := scanTake(ref, add, remove)
			if cut.Generation != want.Generation || !reflect.DeepEqual(cut.Deltas, want.Deltas) ||
				!reflect.DeepEqual(cut.Shares, want.Shares) {
				t.Fatalf("batch %d: Take(%v, %v) differs from a scan of every subscriber:\nTake %+v\nscan %+v",
					batch, add, remove, cut, want)
			}
			f.checkBehind(t, cut)
		}
	}
}

// scanTake is Take as it was before the behind set: it asks every subscriber for its
// delta. It does not take the gone pods, which the other feed takes.
func scanTake(f *Feed, add, remove []string) Cut {
	f.c.mu.Lock()
	defer f.c.mu.Unlock()
	for _, name := range remove {
		if s, ok := f.subs[name]; ok {
			delete(f.subs, name)
			f.c.model.unsubscribe(s)
		}
	}
	cut := Cut{Generation: f.c.model.generation, Deltas: map[string]policy.Delta{}}
	for name, s := range f.subs {
		if d, ok := f.c.model.delta(s); ok {
			cut.Deltas[name] = d
		}
	}
	for _, name := range add {
		if _, ok := f.subs[name]; ok {
			continue
		}
		s, share := f.c.model.subscribe(name)
		s.wake, s.behind = f.wake, f.behind
		f.subs[name] = s
		if cut.Shares == nil {
			cut.Shares = map[string]policy.NodeShare{}
		}
		cut.Shares[name] = share
	}
	return cut
}

// checkBehind fails if a subscriber of f that the cut left out has anything to take, or
// if f's behind set is not empty after the Take.
func (f *Feed) checkBehind(t *testing.T, cut Cut) {
	t.Helper()
	f.c.mu.RLock()
	defer f.c.mu.RUnlock()
	for name, s := range f.subs {
		_, delta := cut.Deltas[name]
		_, share := cut.Shares[name]
		if !delta && !share && (!s.pending.empty() || s.lastGen != s.node.generation) {
			t.Fatalf("the cut left out %s, which has a change to take (generation %d, node at %d, pending %+v)",
				name, s.lastGen, s.node.generation, s.pending)
		}
	}
	// Take asked every subscriber in the set for its delta, which takes it out: one left
	// in would cost every Take until its next delta.
	for s := range f.behind {
		t.Fatalf("after a Take the behind set still holds the subscriber of %s", s.node.name)
	}
}
