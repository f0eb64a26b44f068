package transition

import (
	"testing"
	"time"

	"github.com/kovs-net/kovs/go-controller/pkg/controller/networkpolicy"
	"github.com/kovs-net/kovs/go-controller/pkg/policy"
)

// cuts hands the core prepared cuts, one per Take.
type cuts []networkpolicy.Cut

func (c *cuts) Take(add, remove []string) networkpolicy.Cut {
	if len(*c) == 0 {
		return networkpolicy.Cut{}
	}
	next := (*c)[0]
	*c = (*c)[1:]
	return next
}

// A node that does not realize its restriction in time is held: the others get their
// relaxations after the timeout, and it gets its own only once it reports.
func TestSlowNodeIsHeldAndTheOthersGoOn(t *testing.T) {
	xa := policy.PodKey{Namespace: "x", Name: "a", UID: "1"}
	yb := policy.PodKey{Namespace: "y", Name: "b", UID: "2"}
	share := func(node string, gen uint64, pods []policy.PodKey, iso policy.Isolation) policy.NodeShare {
		s := policy.NewNodeShare(node)
		s.Generation, s.Pods, s.Isolation = gen, pods, iso
		return s
	}
	egressA := policy.Isolation{Egress: []policy.PodKey{xa}}
	ingressB := policy.Isolation{Ingress: []policy.PodKey{yb}}
	src := &cuts{
		{Shares: map[string]policy.NodeShare{
			"node-1": share("node-1", 1, []policy.PodKey{xa}, policy.Isolation{}),
			"node-2": share("node-2", 1, []policy.PodKey{yb}, ingressB)}},
		// node-1 restricts, node-2 relaxes.
		{Deltas: map[string]policy.Delta{
			"node-1": {Node: "node-1", FromGeneration: 1, Generation: 2, Isolation: &egressA},
			"node-2": {Node: "node-2", FromGeneration: 1, Generation: 2, Isolation: &policy.Isolation{}}}},
		// Then node-1 relaxes again.
		{Deltas: map[string]policy.Delta{
			"node-1": {Node: "node-1", FromGeneration: 2, Generation: 3, Isolation: &policy.Isolation{}}}},
	}
	c := newCore(src, 100, 10*time.Second)
	var held []string
	c.onHeld = func(nodes []string, _ uint64) { held = append(held, nodes...) }
	t0 := time.Unix(1000, 0)
	c.adds["node-1"], c.adds["node-2"] = struct{}{}, struct{}{}
	c.advance(t0)
	for _, n := range []string{"node-1", "node-2"} {
		c.realized(n, c.nodes[n].sent.Generation)
	}
	c.advance(t0) // releases the floors, takes the second cut
	n1, n2 := c.nodes["node-1"], c.nodes["node-2"]
	if !n1.sent.Isolation.Isolated(policy.Egress, "x", "a") || !n2.sent.Isolation.Isolated(policy.Ingress, "y", "b") {
		t.Fatalf("after the cut node-1 is sent %+v and node-2 %+v: want node-1's restriction and node-2 held back", n1.sent.Isolation, n2.sent.Isolation)
	}
	if next := c.advance(t0.Add(5 * time.Second)); !next.Equal(t0.Add(10 * time.Second)) {
		t.Errorf("while node-1 has 5 s left, the core asks to be called at %s, want the deadline %s", next, t0.Add(10*time.Second))
	}
	if !n2.sent.Isolation.Isolated(policy.Ingress, "y", "b") {
		t.Fatal("node-2 relaxed before node-1 realized its restriction or timed out")
	}
	restriction := n1.sent.Generation
	c.advance(t0.Add(11 * time.Second)) // node-1 is held; node-2 goes on; the third cut comes
	if len(held) != 1 || held[0] != "node-1" {
		t.Fatalf("held %v, want node-1", held)
	}
	if n2.sent.Isolation.Isolated(policy.Ingress, "y", "b") {
		t.Fatal("node-2 is still held back after node-1 timed out")
	}
	if !n1.sent.Isolation.Isolated(policy.Egress, "x", "a") {
		t.Fatal("held node-1 was relaxed before it reported its restriction")
	}
	c.realized("node-1", restriction)
	c.advance(t0.Add(12 * time.Second))
	if n1.sent.Isolation.Isolated(policy.Egress, "x", "a") || n1.held {
		t.Fatal("node-1 reported its restriction and is still held")
	}
}

// A relaxation waits for the restrictions sent before it or with it, and for no later
// one; restrictions go out while it waits. node-1 restricts and node-2 relaxes (cut 1);
// while node-2's relaxation waits for node-1, node-3 restricts (cut 2, sent at once);
// node-1's report lets node-2's relaxation go though node-3's restriction is not
// realized; node-1 then relaxes (cut 3), which waits for node-3's restriction.
func TestRelaxationWaitsOnlyForTheRestrictionsBeforeIt(t *testing.T) {
	xa := policy.PodKey{Namespace: "x", Name: "a", UID: "1"}
	yb := policy.PodKey{Namespace: "y", Name: "b", UID: "2"}
	zc := policy.PodKey{Namespace: "z", Name: "c", UID: "3"}
	share := func(node string, pods []policy.PodKey, iso policy.Isolation) policy.NodeShare {
		s := policy.NewNodeShare(node)
		s.Generation, s.Pods, s.Isolation = 1, pods, iso
		return s
	}
	delta := func(node string, from uint64, iso policy.Isolation) policy.Delta {
		return policy.Delta{Node: node, FromGeneration: from, Generation: from + 1, Isolation: &iso}
	}
	src := &cuts{
		{Shares: map[string]policy.NodeShare{
			"node-1": share("node-1", []policy.PodKey{xa}, policy.Isolation{}),
			"node-2": share("node-2", []policy.PodKey{yb}, policy.Isolation{Ingress: []policy.PodKey{yb}}),
			"node-3": share("node-3", []policy.PodKey{zc}, policy.Isolation{})}},
		{Deltas: map[string]policy.Delta{
			"node-1": delta("node-1", 1, policy.Isolation{Egress: []policy.PodKey{xa}}),
			"node-2": delta("node-2", 1, policy.Isolation{})}},
		{Deltas: map[string]policy.Delta{"node-3": delta("node-3", 1, policy.Isolation{Ingress: []policy.PodKey{zc}})}},
		{Deltas: map[string]policy.Delta{"node-1": delta("node-1", 2, policy.Isolation{})}},
	}
	c := newCore(src, 100, 10*time.Second)
	var waited []time.Duration
	c.onWaited = func(d time.Duration) { waited = append(waited, d) }
	t0 := time.Unix(1000, 0)
	for _, n := range []string{"node-1", "node-2", "node-3"} {
		c.adds[n] = struct{}{}
	}
	c.advance(t0)
	for _, n := range []string{"node-1", "node-2", "node-3"} {
		c.realized(n, c.nodes[n].sent.Generation)
	}
	c.advance(t0) // releases the floors, takes cut 1
	n1, n2, n3 := c.nodes["node-1"], c.nodes["node-2"], c.nodes["node-3"]
	if !n1.sent.Isolation.Isolated(policy.Egress, "x", "a") || !n2.sent.Isolation.Isolated(policy.Ingress, "y", "b") {
		t.Fatalf("after cut 1: node-1 sent %+v, node-2 %+v; want node-1's restriction, node-2 held back", n1.sent.Isolation, n2.sent.Isolation)
	}
	restriction1 := n1.restriction()
	c.advance(t0.Add(100 * time.Millisecond)) // takes cut 2
	if !n3.sent.Isolation.Isolated(policy.Ingress, "z", "c") {
		t.Fatal("node-3's restriction was not sent while node-2's relaxation waited")
	}
	restriction3 := n3.restriction()
	c.realized("node-1", restriction1)
	c.advance(t0.Add(200 * time.Millisecond)) // releases node-2, takes cut 3
	if n2.sent.Isolation.Isolated(policy.Ingress, "y", "b") {
		t.Fatal("node-2's relaxation still waits after the restriction before it was realized (node-3's came after it)")
	}
	if len(waited) != 1 || waited[0] != 200*time.Millisecond {
		t.Errorf("the relaxations waited %v, want [200ms]", waited)
	}
	if !n1.sent.Isolation.Isolated(policy.Egress, "x", "a") {
		t.Fatal("node-1's relaxation (cut 3) went out before node-3's restriction (cut 2) was realized")
	}
	c.realized("node-3", restriction3)
	c.advance(t0.Add(300 * time.Millisecond))
	if n1.sent.Isolation.Isolated(policy.Egress, "x", "a") {
		t.Fatal("node-1's relaxation still waits after every restriction before it was realized")
	}
}
