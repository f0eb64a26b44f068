package framework

import "golang.org/x/sync/errgroup"

// ForEach runs do(i) for every i in [from, to) on at most workers goroutines, and
// returns the first error (every call still runs). The benchmarks use it to create their
// background objects in bulk.
func ForEach(from, to, workers int, do func(i int) error) error {
	var g errgroup.Group
	g.SetLimit(workers)
	for i := from; i < to; i++ {
		g.Go(func() error { return do(i) })
	}
	return g.Wait()
}
