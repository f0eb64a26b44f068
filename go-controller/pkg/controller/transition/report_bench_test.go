package transition

import (
	"fmt"
	"testing"
	"time"

	"github.com/kovs-net/kovs/go-controller/pkg/controller/networkpolicy"
	"github.com/kovs-net/kovs/go-controller/pkg/growth"
	"github.com/kovs-net/kovs/go-controller/pkg/policy"
)

// BenchmarkAdvancePerReport: n nodes, all sent a restriction (and held back from a
// relaxation) by one cut, then report it realized one by one, each report followed by
// an advance, as Gate.Realized kicks Gate.Run. Each report changes one node, so its cost
// should not depend on n: the work (n reports) reads about 2 at twice the size, and
// "ns/report" is about the same at both sizes; a scan of every node per report reads 4.
func BenchmarkAdvancePerReport(b *testing.B) {
	const n = 2000
	one, two := growth.Ratio2x(b, n, func(n int) func() {
		c, names := restrictedCore(n)
		t0 := time.Unix(1000, 0)
		return func() {
			for _, name := range names {
				c.realized(name, c.nodes[name].restriction())
				c.advance(t0)
			}
			for name, st := range c.nodes {
				if len(st.restrictions) != 0 || !st.diverged.Empty() {
					b.Fatalf("node %s still waits after every node reported", name)
				}
			}
		}
	})
	per1, per2 := float64(one.CPU)/n, float64(two.CPU)/(2*n)
	b.ReportMetric(per1, "ns/report-1x")
	b.ReportMetric(per2, "ns/report-2x")
	b.ReportMetric(per2/per1, "report-ratio-2x")
}

// restrictedCore returns a core over n nodes whose floors are released and that were
// each sent a restriction (a pod isolated for ingress as well as egress, on its way to
// ingress only: the egress isolation is a relaxation that waits), and the nodes' names.
func restrictedCore(n int) (*core, []string) {
	first := networkpolicy.Cut{Shares: map[string]policy.NodeShare{}}
	change := networkpolicy.Cut{Deltas: map[string]policy.Delta{}}
	names := make([]string, n)
	for i := range n {
		name := fmt.Sprint("node-", i)
		names[i] = name
		pod := policy.PodKey{Namespace: "x", Name: name, UID: name}
		s := policy.NewNodeShare(name)
		s.Generation, s.Pods, s.Isolation = 1, []policy.PodKey{pod}, policy.Isolation{Egress: []policy.PodKey{pod}}
		first.Shares[name] = s
		change.Deltas[name] = policy.Delta{Node: name, FromGeneration: 1, Generation: 2,
			Isolation: &policy.Isolation{Ingress: []policy.PodKey{pod}}}
	}
	src := &cuts{first, change}
	c := newCore(src, 100, time.Hour)
	for _, name := range names {
		c.adds[name] = struct{}{}
	}
	t0 := time.Unix(1000, 0)
	c.advance(t0)
	for _, name := range names {
		c.realized(name, c.nodes[name].sent.Generation)
	}
	c.advance(t0) // releases the floors and takes the change
	for _, name := range names {
		if len(c.nodes[name].restrictions) == 0 {
			panic("node " + name + " was sent no restriction")
		}
	}
	return c, names
}
