package stream

import (
	"fmt"
	"sync"

	log "github.com/sirupsen/logrus"

	"github.com/kovs-net/kovs/go-controller/pkg/policy"
)

// receiver hands one connection's messages to the sink and remembers which generations
// the connection delivered.
type receiver struct {
	node string
	sink policy.Sink

	mu sync.Mutex
	// first and last are the generations of the connection's snapshot and of its last
	// delivered message; valid once got is set.
	first, last uint64
	got         bool
}

func newReceiver(node string, sink policy.Sink) *receiver {
	return &receiver{node: node, sink: sink}
}

// deliver applies one message. A delta that does not follow the last message, or that
// the sink refuses, ends the connection with errResync.
func (r *receiver) deliver(m Message) error {
	if err := m.check(r.node); err != nil {
		return err
	}
	switch m.Type {
	case MessageSnapshot:
		if err := r.sink.Snapshot(*m.Snapshot); err != nil {
			return fmt.Errorf("the agent refused the snapshot at generation %d: %w", m.Generation, err)
		}
		log.WithField("node", r.node).WithField("generation", m.Generation).WithField("rules", len(m.Snapshot.Rules)).
			Info("policy snapshot received")
		r.mu.Lock()
		r.first, r.last, r.got = m.Generation, m.Generation, true
		r.mu.Unlock()
	case MessageDelta:
		r.mu.Lock()
		got, last := r.got, r.last
		r.mu.Unlock()
		if !got {
			return fmt.Errorf("delta before the snapshot")
		}
		if m.Delta.FromGeneration != last {
			return fmt.Errorf("delta %d->%d after generation %d: %w", m.Delta.FromGeneration, m.Delta.Generation, last, errResync)
		}
		if err := r.sink.Delta(*m.Delta); err != nil {
			return fmt.Errorf("the agent refused delta %d->%d: %v: %w", m.Delta.FromGeneration, m.Delta.Generation, err, errResync)
		}
		r.mu.Lock()
		r.last = m.Generation
		r.mu.Unlock()
	}
	return nil
}

// snapshot reports whether the connection delivered its snapshot.
func (r *receiver) snapshot() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.got
}

// current returns the generation the sink realized if it is one this connection
// delivered.
func (r *receiver) current() (uint64, bool) {
	g := r.sink.Realized()
	r.mu.Lock()
	defer r.mu.Unlock()
	return g, r.got && r.first <= g && g <= r.last
}
