package harness

import (
	"fmt"
	"testing"
	"time"
)

func TestRealizationTracker(t *testing.T) {
	tr := newRealizationTracker(time.Minute)
	p := policyKey{"ns", "np"}
	sel := selector{"ns", 1}
	c := tr.expect(p, sel, true, []string{"a", "b"}, nil)
	start := c.start
	tr.observe("a", p, true, start.Add(10*time.Millisecond), 0)
	tr.observe("a", p, false, start.Add(20*time.Millisecond), 0) // not what the creation waits for
	tr.observe("c", p, true, start.Add(30*time.Millisecond), 0)  // not concerned
	select {
	case <-c.done:
		t.Fatal("done before b realized it")
	default:
	}
	tr.observe("b", p, true, start.Add(40*time.Millisecond), 0)
	<-c.done
	if f := tr.finishedResults(); len(f) != 1 || f[0].tail.LastNode != "b" || f[0].tail.Last != 40*time.Millisecond ||
		f[0].tail.Second != 10*time.Millisecond || f[0].tail.Nodes != 2 || f[0].tail.P50 != 10*time.Millisecond {
		t.Errorf("finished %+v, want one change whose last node b applied it at 40ms and the second last at 10ms", f)
	}
	lat, lost, none := tr.results()
	if len(lat) != 1 || lat[0] != 40*time.Millisecond || lost != 0 || none != 0 {
		t.Fatalf("results %v %d %d, want [40ms] 0 0", lat, lost, none)
	}

	// A deletion waits only on the nodes that hold the policy.
	d := tr.expect(p, sel, false, []string{"a", "b"}, func(n string) bool { return n == "a" })
	tr.observe("a", p, false, d.start.Add(5*time.Millisecond), 0)
	<-d.done

	// A creation whose only concerned node lost its pods is dropped by the sweep; one not
	// realized by the deadline is lost.
	e := tr.expect(p, sel, true, []string{"gone"}, nil)
	f := tr.expect(policyKey{"ns", "other"}, sel, true, []string{"slow"}, nil)
	tr.sweep(time.Now(), func(node string, _ selector) bool { return node != "gone" })
	<-e.done
	tr.sweep(time.Now().Add(2*time.Minute), func(string, selector) bool { return true })
	<-f.done
	if len(f.lost) != 1 || f.lost[0] != "slow" {
		t.Errorf("lost nodes %v, want [slow]", f.lost)
	}
	lat, lost, none = tr.results()
	if len(lat) != 1 || lost != 1 || none != 1 {
		t.Errorf("results %v lost %d none %d, want one latency, 1 lost, 1 with no node", lat, lost, none)
	}
	if tr.pendingCount() != 0 {
		t.Errorf("%d pending", tr.pendingCount())
	}

	// A deletion supersedes the creation still pending.
	g := tr.expect(p, sel, true, []string{"x"}, nil)
	tr.expect(p, sel, false, []string{"x"}, func(string) bool { return false })
	<-g.done
	if n := tr.supersededCount(); n != 1 {
		t.Errorf("superseded %d, want 1", n)
	}
}

func TestPresenceFlips(t *testing.T) {
	a, b := policyKey{"n", "a"}, policyKey{"n", "b"}
	flips := presenceFlips(map[policyKey]int{a: 2, b: 0}, map[policyKey]int{a: 0, b: 1})
	if len(flips) != 2 {
		t.Fatalf("flips %v", flips)
	}
	for _, f := range flips {
		if (f.Policy == a) == f.Present {
			t.Errorf("flip %v", f)
		}
	}
	if f := presenceFlips(map[policyKey]int{a: 1}, map[policyKey]int{a: 3}); len(f) != 0 {
		t.Errorf("more rules of a present policy is no flip: %v", f)
	}
}

func TestPolicyQueue(t *testing.T) {
	q := &policyQueue{}
	pick := func() selector { return selector{"ns", 1} }
	for n := range livePolicies {
		if _, _, create := q.next(fmt.Sprintf("churn-%d", n), pick); !create {
			t.Fatalf("change %d deletes before %d policies live", n, livePolicies)
		}
	}
	name, _, create := q.next("churn-x", pick)
	if create || name != "churn-0" {
		t.Errorf("after the fill: %s create=%v, want the deletion of churn-0", name, create)
	}
	if name, _, create := q.next("churn-y", pick); !create || name != "churn-y" {
		t.Errorf("a deletion is followed by a creation of the named policy: %s create=%v", name, create)
	}
}

// The split of a change's time: its write's answer and the harness's watch delivering it
// from its start, and the rest to realized from that delivery; a change realized before
// the watch delivered it is counted, not timed from the delivery.
func TestRealizationTrackerSplit(t *testing.T) {
	tr := newRealizationTracker(time.Minute)
	p, sel := policyKey{"ns", "np"}, selector{"ns", 1}
	c := tr.expect(p, sel, true, []string{"a"}, nil)
	tr.answered(c, c.start.Add(30*time.Millisecond))
	tr.seen(p, false, c.start.Add(35*time.Millisecond)) // a deletion: not this change's
	tr.seen(p, true, c.start.Add(40*time.Millisecond))
	tr.seen(p, true, c.start.Add(45*time.Millisecond)) // matched already
	tr.observe("a", p, true, c.start.Add(100*time.Millisecond), 0)
	<-c.done

	d := tr.expect(p, sel, false, []string{"a"}, func(string) bool { return true })
	tr.observe("a", p, false, d.start.Add(10*time.Millisecond), 0)
	<-d.done
	tr.seen(p, false, d.start.Add(20*time.Millisecond)) // after the change was realized

	s := tr.splitResults()
	if len(s.Answered) != 1 || s.Answered[0] != 30*time.Millisecond {
		t.Errorf("answered %v, want [30ms]", s.Answered)
	}
	if len(s.Seen) != 1 || s.Seen[0] != 40*time.Millisecond {
		t.Errorf("seen %v, want [40ms]", s.Seen)
	}
	if len(s.AfterSeen) != 1 || s.AfterSeen[0] != 60*time.Millisecond || s.RealizedUnseen != 1 {
		t.Errorf("after seen %v, realized unseen %d, want [60ms] and 1", s.AfterSeen, s.RealizedUnseen)
	}
	if s := tr.splitResults(); len(s.Answered)+len(s.Seen)+len(s.AfterSeen)+s.RealizedUnseen != 0 {
		t.Errorf("splitResults did not start a new sample: %+v", s)
	}
}

// The allocation's total splits into the delivery to the node and the node's own part,
// sample by sample; a pod deleted first gives none.
func TestAllocationTrackerSplit(t *testing.T) {
	tr := newAllocationTracker()
	a, b := podRef{"ns", "a"}, podRef{"ns", "b"}
	tr.creating(a)
	tr.creating(b)
	tr.mu.Lock()
	start := tr.started[a]
	tr.mu.Unlock()
	tr.created(a)
	tr.allocated(a, start.Add(3*time.Second), start.Add(3*time.Second+40*time.Microsecond))
	tr.deleted(b)
	tr.allocated(b, start.Add(time.Second), start.Add(2*time.Second)) // deleted: no sample
	total, waiting, deleted := tr.results()
	delivery, onNode := tr.splitResults()
	if len(total) != 1 || len(delivery) != 1 || len(onNode) != 1 || waiting != 0 || deleted != 1 {
		t.Fatalf("samples: total %v, delivery %v, on the node %v, waiting %d, deleted %d", total, delivery, onNode, waiting, deleted)
	}
	if delivery[0] != 3*time.Second || onNode[0] != 40*time.Microsecond || total[0] != delivery[0]+onNode[0] {
		t.Errorf("total %s = delivery %s + on the node %s, want 3s + 40µs", total[0], delivery[0], onNode[0])
	}
	if d, o := tr.splitResults(); len(d)+len(o) != 0 {
		t.Errorf("splitResults did not start anew: %v %v", d, o)
	}
	if got := floorRatio(total, delivery); got != "1.000x at p50, 1.000x at p99" {
		t.Errorf("floorRatio = %q", got)
	}
}
