package runner

import (
	"context"
	"testing"
	"time"

	testingclock "k8s.io/utils/clock/testing"
)

// rig runs a runner on a fake clock; every run of its function blocks until the test lets
// it finish, so the test knows at each point how many runs started.
type rig struct {
	t       *testing.T
	clock   *testingclock.FakeClock
	r       *BoundedFrequencyRunner
	started chan struct{}
	finish  chan struct{}
}

func newRig(t *testing.T, b Bounds) *rig {
	t.Helper()
	g := &rig{t: t, clock: testingclock.NewFakeClock(time.Unix(1000, 0)), started: make(chan struct{}), finish: make(chan struct{})}
	r, err := newRunner("test", func() {
		g.started <- struct{}{}
		<-g.finish
	}, b, g.clock)
	if err != nil {
		t.Fatal(err)
	}
	g.r = r
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { r.Loop(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	return g
}

// runs waits for one run to start and lets it finish.
func (g *rig) runs() {
	g.t.Helper()
	g.starts()
	g.finish <- struct{}{}
}

func (g *rig) starts() {
	g.t.Helper()
	select {
	case <-g.started:
	case <-time.After(10 * time.Second):
		g.t.Fatal("no run started")
	}
}

// waiting waits until the loop sleeps on the clock, then checks that no run started.
func (g *rig) waiting() {
	g.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !g.clock.HasWaiters() {
		if time.Now().After(deadline) {
			g.t.Fatal("the loop never waited on the clock")
		}
		time.Sleep(time.Millisecond)
	}
	select {
	case <-g.started:
		g.t.Fatal("a run started while the bucket was empty")
	default:
	}
}

func TestBurstThenMinInterval(t *testing.T) {
	g := newRig(t, Bounds{MinInterval: time.Second, Burst: 2})
	g.r.Run()
	g.runs()
	g.r.Run()
	g.runs() // the second token
	g.r.Run()
	g.waiting() // no token left: the third run waits for one to come back
	g.clock.Step(999 * time.Millisecond)
	g.waiting()
	g.clock.Step(time.Millisecond)
	g.runs()
}

func TestRequestsDuringARunCoalesceIntoOne(t *testing.T) {
	g := newRig(t, Bounds{Burst: 1})
	g.r.Run()
	g.starts()
	for range 5 {
		g.r.Run()
	}
	g.finish <- struct{}{}
	g.starts() // the one run the five requests asked for
	if n := len(g.r.run); n != 0 {
		t.Errorf("%d requests left over after the coalesced run started", n)
	}
	g.finish <- struct{}{}
}

func TestMaxIntervalRunsUnasked(t *testing.T) {
	g := newRig(t, Bounds{MinInterval: time.Second, MaxInterval: 10 * time.Second, Burst: 1})
	g.waiting()
	g.clock.Step(10 * time.Second)
	g.runs()
	// A requested run restarts the countdown.
	g.clock.Step(5 * time.Second)
	g.r.Run()
	g.runs()
	g.waiting()
	g.clock.Step(9 * time.Second)
	g.waiting()
	g.clock.Step(time.Second)
	g.runs()
}

func TestBoundsValidate(t *testing.T) {
	for _, b := range []Bounds{{Burst: 0}, {MinInterval: -1, Burst: 1}, {MinInterval: 2 * time.Second, MaxInterval: time.Second, Burst: 1}} {
		if _, err := NewBoundedFrequencyRunner("bad", func() {}, b); err == nil {
			t.Errorf("bounds %+v accepted", b)
		}
	}
	if _, err := NewBoundedFrequencyRunner("ok", func() {}, Bounds{Burst: 1}); err != nil {
		t.Error(err)
	}
}
