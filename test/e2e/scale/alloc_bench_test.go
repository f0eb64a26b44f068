package scale_test

import (
	"context"
	"os"
	"strconv"
	"testing"

	"github.com/kovs-net/kovs/test/e2e/scale/harness"
)

// Knobs of BenchmarkPodAllocation: the number of hollow nodes, and of pods spread
// uniformly over them (make bench-once measures fewer pods).
const (
	allocNodesEnv = "KOVS_BENCH_ALLOC_NODES"
	allocPodsEnv  = "KOVS_BENCH_ALLOC_PODS"
)

// BenchmarkPodAllocation measures pod address allocation against the real kube-apiserver
// and etcd of a scale-mode sandbox (no node namespaces): 100 hollow nodes (the scale
// harness's, with their Leases; each allocates its pods' addresses with kovs-agent's own
// allocator, package agent/podaddr, and reports them Running), then 2,000 pods bound to
// uniformly drawn nodes, created by 32 writers as fast as kube-apiserver accepts them.
// Reported: allocated pods/s (pods with an address over the first Create to the last
// address allocated), the creation rate, and each pod's Create call to its address
// allocated on its node, p50 and p99 (nearest rank). The log adds kovs-controller's and kube-apiserver's CPU, the
// controller's requests (kube-apiserver's audit log) and its pod reconciles (its
// /metrics). KOVS_BENCH_ALLOC_NODES and KOVS_BENCH_ALLOC_PODS resize it. Each iteration
// is a fresh sandbox; ns/op is the whole iteration and says little.
func BenchmarkPodAllocation(b *testing.B) {
	cfg := harness.AllocationSize()
	nodes, pods := envInt(b, allocNodesEnv, cfg.Nodes), envInt(b, allocPodsEnv, cfg.Pods())
	if pods%nodes != 0 {
		b.Fatalf("%s=%d is not a multiple of %s=%d: every node gets the same number of pods", allocPodsEnv, pods, allocNodesEnv, nodes)
	}
	cfg.Nodes, cfg.PodsPerNode = nodes, pods/nodes
	cfg.Namespaces = min(cfg.Namespaces, nodes)
	if err := cfg.Validate(); err != nil {
		b.Fatalf("%s / %s: %v", allocNodesEnv, allocPodsEnv, err)
	}
	var res *harness.AllocationResult
	for range b.N {
		b.StopTimer()
		s := upScale(b, 1, nil)
		h, err := harness.New(cfg, s.Layout, b.Logf)
		if err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		res, err = h.RunAllocation(context.Background())
		if err != nil {
			b.Fatal(err)
		}
	}
	logAllocation(b, res)
	b.ReportMetric(res.PodsPerSecond(), "allocated-pods/s")
	b.ReportMetric(float64(res.Pods)/res.Created.Seconds(), "created-pods/s")
	b.ReportMetric(float64(res.Latency.Percentile(50).Milliseconds()), "alloc-p50-ms")
	b.ReportMetric(float64(res.Latency.Percentile(99).Milliseconds()), "alloc-p99-ms")
}

func logAllocation(b *testing.B, res *harness.AllocationResult) {
	b.Logf("%d pods on %d nodes: created in %s, all allocated %s after the first Create: %.1f pods/s; creation to address %s",
		res.Pods, res.Nodes, res.Created.Round(1e6), res.Allocated.Round(1e6), res.PodsPerSecond(), res.Latency.Summary())
	wall := res.Phase.End.Sub(res.Phase.Start).Seconds()
	for _, p := range []string{"kovs-controller", "kube-apiserver", "etcd"} {
		cpu := res.Phase.CPUSeconds[p]
		b.Logf("%s: %.1f CPU s in %.1f s (%.0f %% of a core)", p, cpu, wall, 100*cpu/wall)
	}
	b.Logf("kovs-controller's requests meanwhile: %d (%.1f/s)", res.Audit.PerPhase["pods"], float64(res.Audit.PerPhase["pods"])/wall)
	for _, k := range res.Audit.ByKind {
		if k.Kind != "watch" && len(k.Latency) > 0 {
			b.Logf("  (whole run) %s: %d, kube-apiserver's answer %s", k.Kind, k.Count, k.Latency.Summary())
		}
	}
	r := res.Reconciles
	b.Logf("kovs-controller pod (bandwidth) reconciles: %d, mean %s each, mean queue wait %s", r.Reconciles, r.MeanReconcile().Round(1e3), r.MeanWait().Round(1e3))
}

func envInt(b *testing.B, name string, def int) int {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		b.Fatalf("%s=%q: want a positive integer", name, v)
	}
	return n
}
