package networkpolicy

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"os"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	log "github.com/sirupsen/logrus"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/cache"

	"github.com/kovs-net/kovs/go-controller/pkg/controller/cachetrim"
)

var benchScale = flag.Float64("policy.scale", 0,
	"scale of the BenchmarkPolicyShapes workloads: 1 is the published shapes (the default), 0.1 a quick run; "+
		"also settable as KOVS_POLICY_BENCH_SCALE")

func benchShapeScale(b *testing.B) float64 {
	if *benchScale > 0 {
		return *benchScale
	}
	if s := os.Getenv("KOVS_POLICY_BENCH_SCALE"); s != "" {
		v, err := strconv.ParseFloat(s, 64)
		if err != nil || v <= 0 {
			b.Fatalf("KOVS_POLICY_BENCH_SCALE=%q: want a positive number", s)
		}
		return v
	}
	return 1
}

// BenchmarkPolicyShapes times the compiler on the two workload shapes Antrea publishes
// for its controller (see shapes_test.go): from starting the informers over a fake
// clientset that already holds the objects, through every node's share being computed
// (Ready), to every node's snapshot built, one after the other as the policy stream
// builds them for the agents (what an agent receives is the product). The headline "s"
// counts the snapshots; "s-ready" stops at Ready and "s-all-snapshots" is the
// difference. It reports the peak Go heap (MemStats.Alloc sampled every 10 ms, snapshots
// included; it includes the fake clientset's copy of the objects and the informers'
// caches, as the published figures do) and the process's peak RSS (VmHWM, reset before
// the run). The informers are the controller's (cachetrim.NewSharedInformerFactory:
// objects trimmed to the fields kovs reads before they are cached, equal label sets
// shared). A control run then syncs the informers alone over the same objects: its
// peak is the floor under what this harness can measure, and the difference of the live
// heaps after both runs is the compiler's own memory; the control's live heap after the
// sync less the fake clientset's is the informers' caches ("MiB-informers-live": unlike
// the peaks, which move by 100 MiB and more with where the collector's cycles fall, it
// moves by a few percent from run to run). Run it with -benchtime 1x;
// -policy.scale 0.1 runs a tenth of each shape.
//
//	go test -run '^$' -bench BenchmarkPolicyShapes -benchtime 1x ./go-controller/pkg/controller/networkpolicy
func BenchmarkPolicyShapes(b *testing.B) {
	scale := benchShapeScale(b)
	level := log.GetLevel()
	log.SetLevel(log.WarnLevel)
	defer log.SetLevel(level)
	for i, s := range shapes() {
		b.Run(s.name, func(b *testing.B) { runShape(b, s, scale, uint64(i+1)) })
	}
}

type shapeResult struct {
	// ready is the time to Ready; total adds building every node's snapshot.
	ready, total       time.Duration
	heapBase, heapPeak uint64
	rssPeak            uint64
	rssReset           bool
	// liveAfter is the live heap once ready (after a GC): objects, caches and model.
	liveAfter uint64
	// control is the same measurement with the informers alone, without the compiler.
	control             controlResult
	stats               Stats
	rulesOnNodes, nodes int
}

// controlResult measures the harness alone: the fake clientset and the three informers.
type controlResult struct {
	synced              time.Duration
	heapBase            uint64 // the fake clientset's objects, before the informers start
	heapPeak, liveAfter uint64
	rssPeak             uint64
}

func runShape(b *testing.B, s shape, scale float64, seed uint64) {
	var res shapeResult
	for i := 0; i < b.N; i++ {
		res = measureShape(b, s, scale, seed+uint64(i)*100)
	}
	b.ReportMetric(res.total.Seconds(), "s")
	b.ReportMetric(res.ready.Seconds(), "s-ready")
	b.ReportMetric(mib(res.heapPeak), "MiB-heap-peak")
	b.ReportMetric(mib(res.rssPeak), "MiB-rss-peak")
	b.ReportMetric(mib(res.control.heapPeak), "MiB-heap-peak-informers-only")
	b.ReportMetric(mib(res.liveAfter-res.control.liveAfter), "MiB-compiler-live")
	b.ReportMetric(mib(res.control.liveAfter-res.control.heapBase), "MiB-informers-live")
	b.ReportMetric((res.total - res.ready).Seconds(), "s-all-snapshots")
	b.ReportMetric(0, "ns/op")
	report(s, scale, res)
}

func measureShape(b *testing.B, s shape, scale float64, seed uint64) shapeResult {
	b.StopTimer()
	var res shapeResult
	client := newShapeClient(s, scale, seed)
	res.heapBase = heapAlloc()
	res.rssReset = resetPeakRSS()
	sampler := startHeapSampler(10 * time.Millisecond)

	b.StartTimer()
	start := time.Now()
	factory := cachetrim.NewSharedInformerFactory(client, 0)
	c, err := New(factory, Options{})
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	factory.Start(ctx.Done())
	go func() { done <- c.Run(ctx) }()
	<-c.Ready()
	res.ready = time.Since(start)
	res.rulesOnNodes, res.nodes = buildSnapshots(c)
	res.total = time.Since(start)
	b.StopTimer()

	res.heapPeak = sampler.stop()
	res.rssPeak = peakRSS()
	res.stats = c.Stats()
	if want := s.rules(scale); res.stats.Rules != want {
		b.Fatalf("%s: compiled %d rules, want %d", s.name, res.stats.Rules, want)
	}
	runtime.GC()
	res.liveAfter = heapAlloc()
	cancel()
	if err := <-done; err != nil {
		b.Fatal(err)
	}
	factory.Shutdown()
	c, client, factory = nil, nil, nil
	res.control = measureInformersOnly(b, s, scale, seed)
	return res
}

// newShapeClient returns a fake clientset holding the shape's objects, with the garbage
// of their generation collected.
func newShapeClient(s shape, scale float64, seed uint64) *fake.Clientset {
	client := fake.NewSimpleClientset(s.generate(newGenerator(seed), scale)...)
	runtime.GC()
	debug.FreeOSMemory()
	return client
}

// measureInformersOnly syncs the three informers over the same objects without the
// compiler: the floor under what the benchmark can measure.
func measureInformersOnly(b *testing.B, s shape, scale float64, seed uint64) controlResult {
	client := newShapeClient(s, scale, seed)
	heapBase := heapAlloc()
	resetPeakRSS()
	sampler := startHeapSampler(10 * time.Millisecond)
	start := time.Now()
	factory := cachetrim.NewSharedInformerFactory(client, 0)
	synced := []cache.InformerSynced{
		factory.Core().V1().Namespaces().Informer().HasSynced,
		factory.Core().V1().Pods().Informer().HasSynced,
		factory.Networking().V1().NetworkPolicies().Informer().HasSynced,
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer func() {
		cancel()
		factory.Shutdown()
	}()
	factory.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), synced...) {
		b.Fatal("informers did not sync")
	}
	res := controlResult{synced: time.Since(start), heapBase: heapBase, heapPeak: sampler.stop(), rssPeak: peakRSS()}
	runtime.GC()
	res.liveAfter = heapAlloc()
	return res
}

// buildSnapshots builds every node's snapshot once, one at a time as the policy stream
// does for its agents (each is dropped once counted, as one is once sent), and returns
// the rules over all of them and the number of nodes.
func buildSnapshots(c *Compiler) (rules, nodes int) {
	c.mu.Lock() // as Watch: a snapshot may fill the groups' caches
	defer c.mu.Unlock()
	for _, n := range c.model.nodes {
		share := c.model.snapshot(n)
		rules += len(share.Rules)
	}
	return rules, len(c.model.nodes)
}

func report(s shape, scale float64, r shapeResult) {
	rss := fmt.Sprintf("%.0f MiB", mib(r.rssPeak))
	if !r.rssReset {
		rss += " (VmHWM not reset: includes object generation)"
	}
	fmt.Printf("\n%s (%s) at scale %g: %d pods, %d policies, %d groups, %d address sets, %d rules, %d nodes (%d rules over all node shares)\n",
		s.name, s.publishedDescription, scale, r.stats.Pods, r.stats.Policies, r.stats.Groups, r.stats.AddressSets,
		r.stats.Rules, r.nodes, r.rulesOnNodes)
	fmt.Printf("  kovs:            %.2f s to every node's snapshot built (%.2f s to every share ready, %d snapshots in %.2f s more), peak heap %.0f MiB, peak RSS %s; compiler's own live heap %.0f MiB\n",
		r.total.Seconds(), r.ready.Seconds(), r.nodes, (r.total - r.ready).Seconds(), mib(r.heapPeak), rss, mib(r.liveAfter-r.control.liveAfter))
	fmt.Printf("  informers alone: %.2f s to sync, peak heap %.0f MiB, peak RSS %.0f MiB, caches' live heap %.0f MiB (the fake clientset holds %.0f MiB before start)\n",
		r.control.synced.Seconds(), mib(r.control.heapPeak), mib(r.control.rssPeak), mib(r.control.liveAfter-r.control.heapBase), mib(r.heapBase))
	if scale != 1 {
		fmt.Printf("  (published figures are for scale 1 only)\n")
		return
	}
	fmt.Printf("  Antrea (figures of an earlier run beside kovs on this machine kind; compare in one run: make bench): %.2f s, peak heap %.0f MiB, peak RSS %.0f MiB\n"+
		"    -> kovs takes %.2fx the time, %.2fx the heap, %.2fx the RSS (goal: <= 0.25x the time, <= 0.33x heap and RSS)\n",
		s.antreaSeconds, s.antreaHeapMiB, s.antreaRSSMiB, r.total.Seconds()/s.antreaSeconds, mib(r.heapPeak)/s.antreaHeapMiB,
		mib(r.rssPeak)/s.antreaRSSMiB)
}

func mib(bytes uint64) float64 { return float64(bytes) / (1 << 20) }

func heapAlloc() uint64 {
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.Alloc
}

// heapSampler records the peak of MemStats.Alloc.
type heapSampler struct {
	stopc chan struct{}
	wg    sync.WaitGroup
	peak  uint64
}

func startHeapSampler(every time.Duration) *heapSampler {
	s := &heapSampler{stopc: make(chan struct{}), peak: heapAlloc()}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-s.stopc:
				return
			case <-t.C:
				s.peak = max(s.peak, heapAlloc())
			}
		}
	}()
	return s
}

func (s *heapSampler) stop() uint64 {
	close(s.stopc)
	s.wg.Wait()
	return max(s.peak, heapAlloc())
}

// resetPeakRSS resets the process's VmHWM to its current RSS (Linux clear_refs 5).
func resetPeakRSS() bool {
	return os.WriteFile("/proc/self/clear_refs", []byte("5"), 0) == nil
}

// peakRSS returns the process's VmHWM in bytes.
func peakRSS() uint64 {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "VmHWM:"); ok {
			kb, _ := strconv.ParseUint(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			return kb << 10
		}
	}
	return 0
}
