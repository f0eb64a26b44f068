package networkpolicy

import (
	"fmt"
	"testing"

	"github.com/kovs-net/kovs/go-controller/pkg/growth"
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
