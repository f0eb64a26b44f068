package policybench_test

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"

	"github.com/kovs-net/kovs/go-controller/pkg/sandbox/responder"
	"github.com/kovs-net/kovs/test/e2e/framework"
)

const (
	// A new connection every probeEvery, each waiting at most probeAttempt: a SYN the
	// policy drops is never answered, so a denied attempt is one that times out. An
	// attempt whose handshake completed passed the policy, whether or not the target's
	// line then arrived in time (on a loaded machine it sometimes does not).
	probeEvery   = 5 * time.Millisecond
	probeAttempt = 250 * time.Millisecond
	maxInFlight  = 2 * int(probeAttempt/probeEvery)
	// settleAttempts denied attempts in a row, after the last that connected, end the
	// probing of a target.
	settleAttempts = 10
	// openAttempts connections in a row must succeed before a sample starts.
	openAttempts = 3
)

var probePort = responder.Port{Number: 80, Protocol: responder.TCP}

// errUnmeasurable is a sample whose probes failed before the policy could have acted:
// there is no last connection to measure from.
var errUnmeasurable = errors.New("probes failed before the policy could act")

// probes probe every target from its prober until each is denied for good.
type probes struct {
	cancel  context.CancelFunc
	wg      sync.WaitGroup
	targets []*targetProbe
}

// targetProbe is the series of connection attempts to one target.
type targetProbe struct {
	from     string // the prober's network namespace
	target   responder.Target
	identity string
	changed  chan struct{}

	mu       sync.Mutex
	attempts []attempt
}

// attempt is one connection attempt.
type attempt struct {
	start     time.Time
	done      bool
	connected bool
	noLine    bool   // connected, but the target's line did not arrive in time
	cancelled bool   // ended by the end of probing: says nothing
	odd       string // neither connected to the target nor timed out
}

// startProbes starts probing every target from its prober.
func (c *cluster) startProbes(ctx context.Context) *probes {
	ctx, cancel := context.WithCancel(ctx)
	p := &probes{cancel: cancel}
	for i := range c.targets {
		addr, identity := c.target(i)
		t := &targetProbe{from: c.s.NetNSPath(c.probers[i]), target: responder.Target{Addr: addr, Port: probePort},
			identity: identity, changed: make(chan struct{}, 1)}
		p.targets = append(p.targets, t)
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			t.run(ctx)
		}()
	}
	return p
}

// probeStats are the attempts of one sample that did something else than connect before
// enforcement and time out after it.
type probeStats struct {
	// noLine connected without the target's line arriving in time; noLineNear started
	// within probeAttempt before their target's enforcement, noLineLead by how much.
	noLine, noLineNear int
	noLineLead         []time.Duration
	// stray timed out although a later attempt connected (before enforcement, so not the
	// policy's doing); strayEarly started before the policy was created.
	stray, strayEarly int
}

func (s *probeStats) add(o probeStats) {
	s.noLine, s.noLineNear = s.noLine+o.noLine, s.noLineNear+o.noLineNear
	s.noLineLead = append(s.noLineLead, o.noLineLead...)
	s.stray, s.strayEarly = s.stray+o.stray, s.strayEarly+o.strayEarly
}

// String is two lines of the report: the attempts that connected without a line, and the
// stray time-outs.
func (s probeStats) String() string {
	text := fmt.Sprintf("  probes that connected but got no line within %s: %d, all but %d in the %s before their target's enforcement",
		probeAttempt, s.noLine, s.noLine-s.noLineNear, probeAttempt)
	if len(s.noLineLead) > 0 {
		lead := slices.Clone(s.noLineLead)
		slices.Sort(lead)
		text += " (by " + spread(lead) + ")"
	}
	return text + fmt.Sprintf("\n  probes that timed out before enforcement (a later one connected): %d, %d of them before the Create",
		s.stray, s.strayEarly)
}

// stats classifies the finished probes' attempts, given each target's enforcement and the
// policy's creation.
func (p *probes) stats(enforced []time.Time, created time.Time) probeStats {
	var st probeStats
	for i, t := range p.targets {
		t.mu.Lock()
		for _, a := range t.attempts {
			switch {
			case a.noLine:
				st.noLine++
				if d := enforced[i].Sub(a.start); d > 0 && d <= probeAttempt {
					st.noLineNear++
					st.noLineLead = append(st.noLineLead, d)
				}
			case a.done && !a.connected && !a.cancelled && a.start.Before(enforced[i]):
				st.stray++
				if a.start.Before(created) {
					st.strayEarly++
				}
			}
		}
		t.mu.Unlock()
	}
	return st
}

// waitDenied returns, per target, when the policy started dropping its probes: the start
// of the first attempt after the last one that connected. It stops the probes.
func (p *probes) waitDenied() ([]time.Time, error) {
	defer p.stop()
	deadline := time.After(sampleTimeout)
	for _, t := range p.targets {
		for {
			_, settled, err := t.denied(settleAttempts)
			if err != nil {
				return nil, err
			}
			if settled {
				break
			}
			select {
			case <-t.changed:
			case <-deadline:
				return nil, fmt.Errorf("probes to %s still connect after %s", t.identity, sampleTimeout)
			}
		}
	}
	p.stop()
	at := make([]time.Time, len(p.targets))
	for i, t := range p.targets {
		var err error
		if at[i], _, err = t.denied(1); err != nil {
			return nil, err
		}
	}
	return at, nil
}

// stop ends the probing and waits for every attempt to end.
func (p *probes) stop() {
	p.cancel()
	p.wg.Wait()
}

// run starts an attempt every probeEvery, at most maxInFlight at a time, until ctx ends.
func (t *targetProbe) run(ctx context.Context) {
	var wg sync.WaitGroup
	defer wg.Wait()
	slots := make(chan struct{}, maxInFlight)
	tick := time.NewTicker(probeEvery)
	defer tick.Stop()
	for {
		select {
		case slots <- struct{}{}:
			t.mu.Lock()
			seq := len(t.attempts)
			t.attempts = append(t.attempts, attempt{start: time.Now()})
			t.mu.Unlock()
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer func() { <-slots }()
				res, err := t.attempt(ctx)
				t.record(seq, res, err, ctx.Err() != nil)
			}()
		default: // as many attempts in flight as allowed: skip this tick
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// attempt makes one connection from the prober's namespace.
func (t *targetProbe) attempt(ctx context.Context) (responder.Result, error) {
	var res responder.Result
	err := ns.WithNetNSPath(t.from, func(ns.NetNS) error {
		res = responder.Probe(ctx, t.target, probeAttempt)
		return nil
	})
	return res, err
}

func (t *targetProbe) record(seq int, res responder.Result, err error, cancelled bool) {
	a := attempt{done: true}
	switch {
	case err != nil:
		a.odd = err.Error()
	case res.Connected && res.Reply != nil && res.Reply.Identity != t.identity, res.Refused:
		a.odd = framework.Describe(res)
	case res.Connected:
		a.connected, a.noLine = true, res.Reply == nil
	case cancelled:
		a.cancelled = true
	}
	t.mu.Lock()
	a.start = t.attempts[seq].start
	t.attempts[seq] = a
	t.mu.Unlock()
	select {
	case t.changed <- struct{}{}:
	default:
	}
}

// denied returns the start of the first attempt after the last one that connected, and
// whether at least settle attempts from there on, all finished and in a row, timed out.
// An attempt that was refused or answered by someone else is an error: the probes would
// not tell the policy apart from something else.
func (t *targetProbe) denied(settle int) (time.Time, bool, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	last := -1
	for i, a := range t.attempts {
		switch {
		case a.odd != "":
			return time.Time{}, false, fmt.Errorf("probe of %s: %s", t.identity, a.odd)
		case a.connected:
			last = i
		}
	}
	if last < 0 {
		if len(t.attempts) > 0 && t.attempts[0].done {
			return time.Time{}, false, fmt.Errorf("%w: no probe of %s connected", errUnmeasurable, t.identity)
		}
		return time.Time{}, false, nil
	}
	if last+1 >= len(t.attempts) {
		return time.Time{}, false, nil
	}
	run := 0
	for _, a := range t.attempts[last+1:] {
		if !a.done || a.cancelled {
			break
		}
		run++
	}
	return t.attempts[last+1].start, run >= settle, nil
}

// checkOpen waits until every target takes openAttempts connections in a row from its
// prober: no policy denies them.
func (c *cluster) checkOpen(b *testing.B) {
	b.Helper()
	for i := range c.targets {
		addr, identity := c.target(i)
		from := c.s.NetNSPath(c.probers[i])
		if err := waitOpen(from, addr, identity); err != nil {
			b.Fatal(err)
		}
	}
}

func waitOpen(from string, addr netip.Addr, identity string) error {
	t := &targetProbe{from: from, target: responder.Target{Addr: addr, Port: probePort}, identity: identity}
	deadline := time.Now().Add(sampleTimeout)
	inRow := 0
	var last responder.Result
	for inRow < openAttempts {
		if time.Now().After(deadline) {
			return fmt.Errorf("%s (%s) not reachable from its prober within %s: %s", identity, addr, sampleTimeout, framework.Describe(last))
		}
		var err error
		if last, err = t.attempt(context.Background()); err != nil {
			return fmt.Errorf("probe of %s: %w", identity, err)
		}
		switch {
		case last.Connected && last.Reply != nil && last.Reply.Identity == identity:
			inRow++
		case last.Connected && last.Reply != nil:
			return errors.New("probe of " + identity + ": " + framework.Describe(last))
		default:
			inRow = 0
			time.Sleep(20 * time.Millisecond)
		}
	}
	return nil
}
