// Package growth measures how a cost grows with the size of its input, for the benchmarks
// that check a controller path is linear: the same work at size n and at 2n, in one
// process, compared as a ratio. A path linear in its input reads about 2 at twice the
// size; a path that scans the whole cluster for each of its events reads about 4.
//
// The cost of a run is its CPU time (the process's utime+stime, so the garbage
// collector's work counts, and time spent waiting for a busy machine does not) and the
// bytes it allocates on the heap (MemStats.TotalAlloc). The setup that builds the input
// is not measured. Each size runs several times, alternating, and the least cost of each
// is kept: on a shared machine a run is only ever slowed down.
package growth

import (
	"runtime"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// Cost is what one run of a work took.
type Cost struct {
	CPU   time.Duration
	Alloc uint64 // bytes allocated on the heap
}

// Setup builds the input of size n and returns the work to measure on it.
type Setup func(n int) (work func())

// Measure builds the input of size n, then runs the work on it and returns its cost.
func Measure(setup Setup, n int) Cost {
	work := setup(n)
	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	cpu := cpuTime()
	work()
	cost := Cost{CPU: cpuTime() - cpu}
	runtime.ReadMemStats(&after)
	cost.Alloc = after.TotalAlloc - before.TotalAlloc
	return cost
}

// Runs is how many times Ratio2x measures each size.
const Runs = 3

// Ratio2x measures the work at sizes n and 2n (Runs times each, alternating, keeping the
// least of each) and reports, per benchmark iteration, "cpu-ratio-2x" and
// "heap-ratio-2x" (the cost at 2n over the cost at n: CPU time and bytes allocated) and
// the costs at n ("cpu-ms-1x", "alloc-MiB-1x"). Keep a run well under a second: the
// benchmarks run at -benchtime 1x in make test.
func Ratio2x(b *testing.B, n int, setup Setup) (one, two Cost) {
	b.Helper()
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		one, two = Cost{}, Cost{}
		for run := range Runs {
			one = least(one, Measure(setup, n), run == 0)
			two = least(two, Measure(setup, 2*n), run == 0)
		}
	}
	b.ReportMetric(float64(two.CPU)/float64(max(one.CPU, time.Microsecond)), "cpu-ratio-2x")
	b.ReportMetric(float64(two.Alloc)/float64(max(one.Alloc, 1)), "heap-ratio-2x")
	b.ReportMetric(float64(one.CPU)/float64(time.Millisecond), "cpu-ms-1x")
	b.ReportMetric(float64(one.Alloc)/(1<<20), "alloc-MiB-1x")
	return one, two
}

// least keeps, of two costs, the least CPU time and the least allocation.
func least(a, b Cost, first bool) Cost {
	if first || b.CPU < a.CPU {
		a.CPU = b.CPU
	}
	if first || b.Alloc < a.Alloc {
		a.Alloc = b.Alloc
	}
	return a
}

func cpuTime() time.Duration {
	var ru unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
