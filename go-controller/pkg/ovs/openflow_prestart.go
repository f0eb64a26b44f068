package ovs

import (
	"sync"
	"time"

	"github.com/sirupsen/logrus"
)

// prestarted keeps one process of a command started ahead of its use, loaded and waiting
// on its standard input, so that a caller pays only for the work, not for the program's
// start. ovs-ofctl reads its whole bundle before it connects to the switch, so a process
// started minutes before its bundle still finds the switch as it is then (a restarted
// ovs-vswitchd too). Its start, about 5 ms of dynamic linking on these machines, is most
// of what a small bundle costs through a fresh ovs-ofctl (the README's dependency notes).
//
// A process left waiting when its owner exits reads the end of its input: an empty
// bundle, which ovs-ofctl applies as nothing and exits.
type prestarted struct {
	starter Starter
	cmd     Command       // started without Stdin
	delay   time.Duration // from a take to the next start
	log     *logrus.Entry

	mu       sync.Mutex
	next     Started // nil: none ready
	starting bool
	closed   bool
}

// newPrestarted starts the first process now, and each later one delay after the
// previous one was taken.
func newPrestarted(starter Starter, cmd Command, delay time.Duration, log *logrus.Entry) *prestarted {
	p := &prestarted{starter: starter, cmd: cmd, delay: delay, log: log}
	p.startAfter(0)
	return p
}

// take returns the process started ahead, or nil when none is ready (the caller then runs
// the command whole). The caller calls refill once done: the next process then loads
// while the caller's is not running any more.
func (p *prestarted) take() Started {
	p.mu.Lock()
	defer p.mu.Unlock()
	s := p.next
	p.next = nil
	return s
}

// ready reports whether a process is loaded and waiting for the next take.
func (p *prestarted) ready() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.next != nil
}

// refill starts the next process in the background, after the delay, unless one is ready
// or starting.
func (p *prestarted) refill() { p.startAfter(p.delay) }

// startAfter starts a process in the background after delay, unless one is ready or
// starting.
func (p *prestarted) startAfter(delay time.Duration) {
	p.mu.Lock()
	if p.closed || p.next != nil || p.starting {
		p.mu.Unlock()
		return
	}
	p.starting = true
	p.mu.Unlock()
	go func() {
		time.Sleep(delay)
		s, err := p.starter.Start(p.cmd)
		p.mu.Lock()
		p.starting = false
		keep := err == nil && !p.closed && p.next == nil
		if keep {
			p.next = s
		}
		p.mu.Unlock()
		switch {
		case err != nil:
			// The next caller runs the command whole, and reports what fails.
			p.log.WithError(err).WithField("command", p.cmd.String()).Debug("cannot start the command ahead")
		case !keep:
			s.Abandon()
		}
	}()
}

// close stops the process waiting, if any; later takes return nil.
func (p *prestarted) close() {
	p.mu.Lock()
	s := p.next
	p.next, p.closed = nil, true
	p.mu.Unlock()
	if s != nil {
		s.Abandon()
	}
}
