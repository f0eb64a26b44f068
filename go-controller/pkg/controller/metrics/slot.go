package metrics

import "sync"

// Slot holds the source of a collector that exists only part of the time (the
// controllers run only while leading): Set attaches it, Clear detaches it.
type Slot[T any] struct {
	mu  sync.Mutex
	v   T
	set bool
}

// Set attaches v.
func (s *Slot[T]) Set(v T) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.v, s.set = v, true
}

// Clear detaches the source.
func (s *Slot[T]) Clear() {
	s.mu.Lock()
	defer s.mu.Unlock()
	var zero T
	s.v, s.set = zero, false
}

// Get returns the source, if one is attached.
func (s *Slot[T]) Get() (T, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.v, s.set
}
