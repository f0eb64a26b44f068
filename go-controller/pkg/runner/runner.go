// Package runner has the one loop kovs uses wherever many signals must become few runs of
// a function: the agent's flow sync and Service proxy, kovs-controller's NetworkPolicy
// compiler and its delivery of deltas to each node, and the policy stream's realization
// reports. It has the shape of kube-proxy's BoundedFrequencyRunner (a minimum interval, a
// maximum interval and a burst); kube-proxy's own lives in k8s.io/kubernetes, which this
// module does not import (see the README's dependency notes).
package runner

import (
	"context"
	"fmt"
	"time"

	"k8s.io/utils/clock"
)

// Bounds are how often a BoundedFrequencyRunner runs its function.
type Bounds struct {
	// MinInterval is the time one run's token takes to come back: after Burst runs in a
	// row, runs are at least MinInterval apart (start to start). Zero: no limit.
	MinInterval time.Duration
	// MaxInterval is the longest the function goes without running: it runs that long
	// after its last run even if nobody asked. Zero: only when asked.
	MaxInterval time.Duration
	// Burst is how many runs may follow each other without waiting (at least 1).
	Burst int
}

// Validate checks that the bounds make sense together.
func (b Bounds) Validate() error {
	switch {
	case b.MinInterval < 0 || b.MaxInterval < 0:
		return fmt.Errorf("intervals must not be negative (min %s, max %s)", b.MinInterval, b.MaxInterval)
	case b.MaxInterval != 0 && b.MaxInterval < b.MinInterval:
		return fmt.Errorf("max interval %s is shorter than min interval %s", b.MaxInterval, b.MinInterval)
	case b.Burst < 1:
		return fmt.Errorf("burst %d: want at least 1", b.Burst)
	}
	return nil
}

// BoundedFrequencyRunner runs a function when asked (Run), coalescing requests: every
// request made before a run starts is served by that run, and a request made while the
// function runs is served by the next run. Runs are rate-limited by a token bucket of
// Burst tokens, one coming back every MinInterval, and the function also runs every
// MaxInterval without a request.
type BoundedFrequencyRunner struct {
	name   string
	fn     func()
	bounds Bounds
	clock  clock.Clock
	run    chan struct{}
}

// NewBoundedFrequencyRunner returns a runner of fn; Loop runs it. name is for errors.
func NewBoundedFrequencyRunner(name string, fn func(), b Bounds) (*BoundedFrequencyRunner, error) {
	return newRunner(name, fn, b, clock.RealClock{})
}

func newRunner(name string, fn func(), b Bounds, c clock.Clock) (*BoundedFrequencyRunner, error) {
	if err := b.Validate(); err != nil {
		return nil, fmt.Errorf("runner %s: %w", name, err)
	}
	return &BoundedFrequencyRunner{name: name, fn: fn, bounds: b, clock: c, run: make(chan struct{}, 1)}, nil
}

// MustNewBoundedFrequencyRunner is NewBoundedFrequencyRunner for bounds that are
// constants of the program: invalid ones are a programming error.
func MustNewBoundedFrequencyRunner(name string, fn func(), b Bounds) *BoundedFrequencyRunner {
	r, err := NewBoundedFrequencyRunner(name, fn, b)
	if err != nil {
		panic(err)
	}
	return r
}

// Run asks for a run as soon as the bounds allow. It never blocks.
func (r *BoundedFrequencyRunner) Run() {
	select {
	case r.run <- struct{}{}:
	default:
	}
}

// Loop runs the function as asked and bounded until ctx ends. The first run happens only
// when asked (or after MaxInterval).
func (r *BoundedFrequencyRunner) Loop(ctx context.Context) {
	b := bucket{tokens: r.bounds.Burst, refilled: r.clock.Now()}
	idle := r.idleTimer()
	pending := false
	for {
		now := r.clock.Now()
		b.refill(now, r.bounds)
		if pending && b.tokens > 0 {
			b.tokens--
			pending = false
			// The countdown restarts after the run; stopping it first also lets tests on
			// a fake clock tell a running function from a waiting loop.
			stop(idle)
			r.fn()
			idle = r.idleTimer()
			continue
		}
		var wake <-chan time.Time
		if pending {
			wake = r.clock.After(b.nextToken(now, r.bounds))
		}
		select {
		case <-ctx.Done():
			stop(idle)
			return
		case <-r.run:
			pending = true
		case <-wake:
		case <-idleChan(idle):
			pending = true
		}
	}
}

func (r *BoundedFrequencyRunner) idleTimer() clock.Timer {
	if r.bounds.MaxInterval == 0 {
		return nil
	}
	return r.clock.NewTimer(r.bounds.MaxInterval)
}

func stop(t clock.Timer) {
	if t != nil {
		t.Stop()
	}
}

func idleChan(t clock.Timer) <-chan time.Time {
	if t == nil {
		return nil
	}
	return t.C()
}

// bucket is the runner's token bucket.
type bucket struct {
	tokens   int
	refilled time.Time // when the last token came back (now, while the bucket is full)
}

// refill returns the tokens that came back by now.
func (b *bucket) refill(now time.Time, bounds Bounds) {
	if bounds.MinInterval == 0 {
		b.tokens = bounds.Burst
		return
	}
	for b.tokens < bounds.Burst && now.Sub(b.refilled) >= bounds.MinInterval {
		b.tokens++
		b.refilled = b.refilled.Add(bounds.MinInterval)
	}
	if b.tokens == bounds.Burst {
		b.refilled = now
	}
}

// nextToken is how long until the next token comes back.
func (b *bucket) nextToken(now time.Time, bounds Bounds) time.Duration {
	return max(bounds.MinInterval-now.Sub(b.refilled), 0)
}
