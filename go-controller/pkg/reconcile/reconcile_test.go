package reconcile

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func TestRetriesUntilSuccessThenStops(t *testing.T) {
	var calls atomic.Int32
	done := make(chan struct{})
	rec := Func(func(_ context.Context, key string) error {
		if calls.Add(1) < 3 {
			return errors.New("not yet")
		}
		close(done)
		return nil
	})
	c := New(Options{Name: "t", Workers: 1, BaseDelay: time.Millisecond, MaxDelay: 5 * time.Millisecond}, rec)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { _ = c.Run(ctx) }()
	c.Enqueue("a")
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatalf("reconcile called %d times, want success on the 3rd", calls.Load())
	}
	time.Sleep(50 * time.Millisecond)
	if n := calls.Load(); n != 3 {
		t.Fatalf("reconcile called %d times after success, want 3", n)
	}
}

func TestGivesUpAfterMaxRetries(t *testing.T) {
	var calls atomic.Int32
	rec := Func(func(context.Context, string) error { calls.Add(1); return errors.New("always") })
	c := New(Options{Name: "t", Workers: 1, MaxRetries: 4, BaseDelay: time.Millisecond, MaxDelay: time.Millisecond}, rec)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { _ = c.Run(ctx) }()
	c.Enqueue("a")
	time.Sleep(300 * time.Millisecond)
	if n := calls.Load(); n != 5 {
		t.Fatalf("reconcile called %d times, want 1 + 4 retries", n)
	}
}

func TestOneKeyIsNeverReconciledConcurrently(t *testing.T) {
	var mu sync.Mutex
	running := map[string]bool{}
	var overlap atomic.Bool
	var total atomic.Int32
	rec := Func(func(_ context.Context, key string) error {
		mu.Lock()
		if running[key] {
			overlap.Store(true)
		}
		running[key] = true
		mu.Unlock()
		time.Sleep(time.Millisecond)
		mu.Lock()
		running[key] = false
		mu.Unlock()
		total.Add(1)
		return nil
	})
	c := New(Options{Name: "t", Workers: 4}, rec)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { _ = c.Run(ctx) }()
	for i := 0; i < 200; i++ {
		c.Enqueue([]string{"a", "b"}[i%2])
	}
	time.Sleep(300 * time.Millisecond)
	if overlap.Load() {
		t.Fatal("a key was reconciled by two workers at once")
	}
	if total.Load() < 2 {
		t.Fatalf("only %d reconciles", total.Load())
	}
}
