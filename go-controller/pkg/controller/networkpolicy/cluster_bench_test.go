package networkpolicy

import (
	"context"
	"fmt"
	"runtime"
	"runtime/debug"
	"testing"
	"time"

	log "github.com/sirupsen/logrus"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/cache"
	policyfake "sigs.k8s.io/network-policy-api/pkg/client/clientset/versioned/fake"
	"sigs.k8s.io/network-policy-api/pkg/client/informers/externalversions"

	"github.com/kovs-net/kovs/go-controller/pkg/controller/cachetrim"
	"github.com/kovs-net/kovs/go-controller/pkg/controller/clusterpolicy"
	"github.com/kovs-net/kovs/go-controller/pkg/controller/clusterpolicy/workload"
)

// BenchmarkClusterPolicyWorkload is BenchmarkPolicyShapes's measurement, in the same
// form, of the controller with the ClusterNetworkPolicy workload (package workload: 100
// policies, 60 Admin and 40 Baseline, over 1,000 pods in 50 namespaces on 100 nodes, no
// NetworkPolicy): from starting the informers over fake clientsets that already hold the
// objects, the compiler waiting for the first cluster rules as kovs-controller's does
// when the resource is served (ExpectClusterRules) and the Feed compiling them
// (clusterpolicy.NewFeed, the controller's), through every node's share ready ("s-ready")
// to every node's snapshot built ("s"). Peak heap and RSS, the control run (the
// informers alone, the ClusterNetworkPolicy one included) and the live heaps are as in
// BenchmarkPolicyShapes. It also reports the cluster rules over all the nodes' shares.
// Run it with -benchtime 1x; clusterpolicy's BenchmarkFeedBatchGrowth gives the growth
// ratio of the Feed's batch at twice the pods and at twice the policies.
func BenchmarkClusterPolicyWorkload(b *testing.B) {
	level := log.GetLevel()
	log.SetLevel(log.WarnLevel)
	defer log.SetLevel(level)
	w, err := workload.New(1000, 100)
	if err != nil {
		b.Fatal(err)
	}
	var res shapeResult
	var clusterRules int
	for i := 0; i < b.N; i++ {
		res, clusterRules = measureClusterWorkload(b, w)
	}
	b.ReportMetric(res.total.Seconds(), "s")
	b.ReportMetric(res.ready.Seconds(), "s-ready")
	b.ReportMetric(mib(res.heapPeak), "MiB-heap-peak")
	b.ReportMetric(mib(res.rssPeak), "MiB-rss-peak")
	b.ReportMetric(mib(res.control.heapPeak), "MiB-heap-peak-informers-only")
	b.ReportMetric(mib(res.liveAfter-res.control.liveAfter), "MiB-compiler-live")
	b.ReportMetric(mib(res.control.liveAfter-res.control.heapBase), "MiB-informers-live")
	b.ReportMetric((res.total - res.ready).Seconds(), "s-all-snapshots")
	b.ReportMetric(float64(clusterRules), "cluster-rules-on-nodes")
	b.ReportMetric(0, "ns/op")
	fmt.Printf("\nClusterNetworkPolicy workload: %d pods, %d namespaces, %d nodes, %d ClusterNetworkPolicies (%d cluster rules over all node shares)\n",
		len(w.Pods), len(w.Namespaces), res.nodes, len(w.Policies), clusterRules)
	fmt.Printf("  kovs:            %.2f s to every node's snapshot built (%.2f s to every share ready, %d snapshots in %.2f s more), peak heap %.0f MiB, peak RSS %.0f MiB; compiler's and feed's own live heap %.0f MiB\n",
		res.total.Seconds(), res.ready.Seconds(), res.nodes, (res.total - res.ready).Seconds(), mib(res.heapPeak), mib(res.rssPeak),
		mib(res.liveAfter-res.control.liveAfter))
	fmt.Printf("  informers alone: %.2f s to sync, peak heap %.0f MiB, peak RSS %.0f MiB, caches' live heap %.0f MiB (the fake clientsets hold %.0f MiB before start)\n",
		res.control.synced.Seconds(), mib(res.control.heapPeak), mib(res.control.rssPeak), mib(res.control.liveAfter-res.control.heapBase), mib(res.heapBase))
}

// clusterClients are fake clientsets holding the workload's objects, with the garbage of
// their making collected.
func clusterClients(w *workload.Cluster) (*fake.Clientset, *policyfake.Clientset) {
	core, policies := fake.NewSimpleClientset(w.CoreObjects()...), policyfake.NewSimpleClientset(w.PolicyObjects()...)
	runtime.GC()
	debug.FreeOSMemory()
	return core, policies
}

func measureClusterWorkload(b *testing.B, w *workload.Cluster) (shapeResult, int) {
	b.StopTimer()
	var res shapeResult
	client, policyClient := clusterClients(w)
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
	c.ExpectClusterRules()
	feed, err := clusterpolicy.NewFeed(policyClient, factory, c, 0)
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 2)
	factory.Start(ctx.Done())
	go func() { done <- c.Run(ctx) }()
	go func() { done <- feed.Run(ctx) }()
	<-c.Ready()
	res.ready = time.Since(start)
	clusterRules := 0
	c.mu.Lock() // as Watch: a snapshot may fill the groups' caches
	for _, n := range c.model.nodes {
		clusterRules += len(c.model.snapshot(n).ClusterRules)
	}
	res.nodes = len(c.model.nodes)
	c.mu.Unlock()
	res.total = time.Since(start)
	b.StopTimer()

	res.heapPeak = sampler.stop()
	res.rssPeak = peakRSS()
	if clusterRules == 0 {
		b.Fatal("no node's share has cluster rules: the feed's rules never reached the compiler")
	}
	runtime.GC()
	res.liveAfter = heapAlloc()
	cancel()
	for range 2 {
		if err := <-done; err != nil {
			b.Fatal(err)
		}
	}
	factory.Shutdown()
	c, feed, client, policyClient, factory = nil, nil, nil, nil, nil
	res.control = measureClusterInformersOnly(b, w)
	return res, clusterRules
}

// measureClusterInformersOnly syncs the informers the controller and the feed use over
// the same objects, without the compiler or the feed: the floor under the measurement.
func measureClusterInformersOnly(b *testing.B, w *workload.Cluster) controlResult {
	client, policyClient := clusterClients(w)
	heapBase := heapAlloc()
	resetPeakRSS()
	sampler := startHeapSampler(10 * time.Millisecond)
	start := time.Now()
	factory := cachetrim.NewSharedInformerFactory(client, 0)
	policies := externalversions.NewSharedInformerFactory(policyClient, 0)
	synced := []cache.InformerSynced{
		factory.Core().V1().Namespaces().Informer().HasSynced,
		factory.Core().V1().Pods().Informer().HasSynced,
		factory.Core().V1().Nodes().Informer().HasSynced,
		factory.Networking().V1().NetworkPolicies().Informer().HasSynced,
		policies.Policy().V1beta1().ClusterNetworkPolicies().Informer().HasSynced,
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer func() {
		cancel()
		factory.Shutdown()
		policies.Shutdown()
	}()
	factory.Start(ctx.Done())
	policies.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), synced...) {
		b.Fatal("informers did not sync")
	}
	res := controlResult{synced: time.Since(start), heapBase: heapBase, heapPeak: sampler.stop(), rssPeak: peakRSS()}
	runtime.GC()
	res.liveAfter = heapAlloc()
	return res
}
