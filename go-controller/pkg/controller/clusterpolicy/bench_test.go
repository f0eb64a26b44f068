package clusterpolicy

import (
	"fmt"
	"net/netip"
	"runtime"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"sigs.k8s.io/network-policy-api/apis/v1beta1"
	listers "sigs.k8s.io/network-policy-api/pkg/client/listers/apis/v1beta1"

	"github.com/kovs-net/kovs/go-controller/pkg/controller/clusterpolicy/workload"
	"github.com/kovs-net/kovs/go-controller/pkg/growth"
	"github.com/kovs-net/kovs/go-controller/pkg/policy"
)

// BenchmarkClusterPolicyCompile compiles 100 ClusterNetworkPolicies (60 Admin, 40
// Baseline) over 1,000 pods in 50 namespaces from scratch: each policy selects the pods
// of one tenant's namespaces (a tenant is 5 namespaces, 100 pods) and has 3 ingress and 2
// egress rules with namespace, pod and network peers and 1-2 ports. It reports the rules
// compiled, the heap the compiled rules hold ("MiB-rules-live", live heap after less
// before), and the size the datapath would program with one conjunction per rule
// ("elements": the sum over rules of subjects, peers and ports), against the product a
// cross-product encoding would need ("elements-product"). Run it with -benchtime 1x; it
// is the from-scratch compile, not yet the incremental compiler's (see
// docs/cluster-network-policy.md).
func BenchmarkClusterPolicyCompile(b *testing.B) {
	c, policies := benchWorkload(1000, 50, 100)
	var rules Rules
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	b.ResetTimer()
	for b.Loop() {
		rules = Compile(policies, c)
	}
	b.StopTimer()
	runtime.GC()
	runtime.ReadMemStats(&after)
	sum, product := 0, 0
	for _, r := range rules {
		ports := max(len(r.Ports), 1)
		peers := max(len(r.Peers), 1)
		sum += len(r.Subjects) + peers + ports
		product += len(r.Subjects) * peers * ports
	}
	b.ReportMetric(float64(len(rules)), "rules")
	b.ReportMetric(float64(sum), "elements")
	b.ReportMetric(float64(product), "elements-product")
	b.ReportMetric(float64(int64(after.HeapAlloc)-int64(before.HeapAlloc))/(1<<20), "MiB-rules-live")
	runtime.KeepAlive(rules)
}

func benchWorkload(pods, namespaces, policies int) (*Cluster, []*v1beta1.ClusterNetworkPolicy) {
	c := &Cluster{Namespaces: map[string]map[string]string{}}
	for n := range namespaces {
		name := fmt.Sprintf("ns-%d", n)
		c.Namespaces[name] = map[string]string{"tenant": fmt.Sprint(n / 5), "kubernetes.io/metadata.name": name}
	}
	for i := range pods {
		ns := fmt.Sprintf("ns-%d", i%namespaces)
		ip := netip.AddrFrom4([4]byte{10, byte(i >> 16), byte(i >> 8), byte(i)})
		c.Pods = append(c.Pods, Pod{PodKey: policy.PodKey{Namespace: ns, Name: fmt.Sprintf("pod-%d", i)},
			Labels: map[string]string{"app": fmt.Sprint(i % 10)}, IPs: []netip.Addr{ip}, Node: fmt.Sprintf("node-%d", i%100),
			Ports: []NamedPort{{Name: "http", Protocol: policy.TCP, Number: 8080}}})
	}
	tenants := namespaces / 5
	sel := func(k, v string) *metav1.LabelSelector {
		return &metav1.LabelSelector{MatchLabels: map[string]string{k: v}}
	}
	var out []*v1beta1.ClusterNetworkPolicy
	for i := range policies {
		tier := v1beta1.AdminTier
		if i >= policies*6/10 {
			tier = v1beta1.BaselineTier
		}
		t, other := fmt.Sprint(i%tenants), fmt.Sprint((i+1)%tenants)
		p := &v1beta1.ClusterNetworkPolicy{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("cnp-%d", i)},
			Spec: v1beta1.ClusterNetworkPolicySpec{Tier: tier, Priority: int32(i % 50),
				Subject: v1beta1.ClusterNetworkPolicySubject{Namespaces: sel("tenant", t)}}}
		p.Spec.Ingress = []v1beta1.ClusterNetworkPolicyIngressRule{
			{Action: accept, From: []v1beta1.ClusterNetworkPolicyIngressPeer{{Namespaces: sel("tenant", t)}}},
			{Action: pass, From: []v1beta1.ClusterNetworkPolicyIngressPeer{{Pods: &v1beta1.NamespacedPod{
				NamespaceSelector: *sel("tenant", other), PodSelector: *sel("app", fmt.Sprint(i%10))}}}, Protocols: []v1beta1.ClusterNetworkPolicyProtocol{tcp(443)}},
			{Action: deny, From: []v1beta1.ClusterNetworkPolicyIngressPeer{{Namespaces: &metav1.LabelSelector{}}}},
		}
		p.Spec.Egress = []v1beta1.ClusterNetworkPolicyEgressRule{
			{Action: accept, To: []v1beta1.ClusterNetworkPolicyEgressPeer{{Networks: []v1beta1.CIDR{"192.168.0.0/16"}}}, Protocols: []v1beta1.ClusterNetworkPolicyProtocol{tcp(5432), tcp(6379)}},
			{Action: deny, To: []v1beta1.ClusterNetworkPolicyEgressPeer{{Namespaces: sel("tenant", other)}}},
		}
		out = append(out, p)
	}
	return c, out
}

// BenchmarkClusterPolicyFeedBatch is one batch of the Feed on the same workload: every
// policy compiled and split into the 100 nodes' rules (Rules.NodeRules). It reports the
// most rules a node gets and the flows the cluster policy stage would compile for that
// node on an IPv4 node (per rule: its local subjects + peers + ports + 1, the linear
// formula TestClusterPolicyFlowCountIsLinear holds the stage to; a rule with neither
// peers nor ports: its subjects), and the heap the nodes' rules hold.
func BenchmarkClusterPolicyFeedBatch(b *testing.B) {
	c, policies := benchWorkload(1000, 50, 100)
	nodeOf := map[policy.PodKey]string{}
	for _, p := range c.Pods {
		nodeOf[p.PodKey] = p.Node
	}
	var byNode map[string][]policy.ClusterRule
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	b.ResetTimer()
	for b.Loop() {
		byNode = Compile(policies, c).NodeRules(func(k policy.PodKey) string { return nodeOf[k] })
	}
	b.StopTimer()
	runtime.GC()
	runtime.ReadMemStats(&after)
	maxRules, maxFlows := 0, 0
	for _, rules := range byNode {
		flows := 0
		for _, r := range rules {
			switch {
			case len(r.Peers) == 0 && len(r.Ports) == 0 && r.AnyPeer:
				flows += len(r.Subjects)
			default:
				flows += len(r.Subjects) + len(r.Peers) + len(r.Ports) + 1
			}
		}
		maxRules, maxFlows = max(maxRules, len(rules)), max(maxFlows, flows)
	}
	b.ReportMetric(float64(maxRules), "rules-node-max")
	b.ReportMetric(float64(maxFlows), "flows-node-max")
	b.ReportMetric(float64(int64(after.HeapAlloc)-int64(before.HeapAlloc))/(1<<20), "MiB-node-rules-live")
	runtime.KeepAlive(byNode)
}

// BenchmarkFeedBatchGrowth is the growth of one batch of the Feed on the shared
// workload (package workload), the cluster read from the objects (NewCluster), every
// policy compiled and split into the nodes' rules as Feed.sync does, at twice the
// cluster: "pods" doubles the pods (and with them namespaces and nodes) under the same
// 100 policies, from 1,000 to 2,000; "policies" doubles the policies over the same
// 1,000 pods, from 100 to 200. It reports growth's cpu-ratio-2x and heap-ratio-2x
// (about 2 for a cost linear in what doubles). Each batch compiles every policy
// against every pod its selectors reach, so its cost grows with their product: twice
// either is about twice the work.
func BenchmarkFeedBatchGrowth(b *testing.B) {
	batch := func(pods, policies int) func() {
		w, err := workload.New(pods, policies)
		if err != nil {
			b.Fatal(err)
		}
		return func() {
			c, nodeOf := NewCluster(w.Namespaces, w.Pods, w.Nodes)
			byNode := Compile(w.Policies, c).NodeRules(func(k policy.PodKey) string { return nodeOf[k] })
			if len(byNode) == 0 {
				b.Fatal("no node has cluster rules")
			}
		}
	}
	b.Run("pods", func(b *testing.B) {
		growth.Ratio2x(b, 1000, func(n int) func() { return batch(n, 100) })
	})
	b.Run("policies", func(b *testing.B) {
		growth.Ratio2x(b, 100, func(n int) func() { return batch(1000, n) })
	})
}

// BenchmarkFeedWithoutPolicies is one batch of the feed with no ClusterNetworkPolicy in a
// cluster of 50,000 pods on 5,000 nodes, after one pod changed: "incremental" as the feed
// runs (only that pod evaluated), "full" as every batch ran before (the whole cluster read
// and compiled, which the feed still does while a policy exists). It reports the
// full/incremental ratio of the time per batch.
func BenchmarkFeedWithoutPolicies(b *testing.B) {
	const pods, nodes = 50000, 5000
	podIndex := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
	nsIndex := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	nodeIndex := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	for n := range nodes {
		_ = nodeIndex.Add(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("node-%d", n)},
			Status: corev1.NodeStatus{Addresses: []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: fmt.Sprintf("172.16.%d.%d", n/250, n%250)}}}})
	}
	for n := range 500 {
		_ = nsIndex.Add(&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("ns-%d", n)}})
	}
	for i := range pods {
		_ = podIndex.Add(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: fmt.Sprintf("ns-%d", i%500), Name: fmt.Sprintf("pod-%d", i),
			UID: types.UID(fmt.Sprint("uid-", i)), Labels: map[string]string{"app": fmt.Sprint(i % 50)}},
			Spec:   corev1.PodSpec{NodeName: fmt.Sprintf("node-%d", i%nodes)},
			Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIPs: []corev1.PodIP{{IP: fmt.Sprintf("10.%d.%d.%d", i>>16, (i>>8)&255, i&255)}}}})
	}
	feed := func() *Feed {
		f := &Feed{sink: discardSink{}, policies: listers.NewClusterNetworkPolicyLister(cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})),
			pods: corelisters.NewPodLister(podIndex), namespaces: corelisters.NewNamespaceLister(nsIndex), nodes: corelisters.NewNodeLister(nodeIndex),
			changed: map[types.NamespacedName]bool{}, evaluated: map[types.NamespacedName]evaluation{}, readAll: true}
		f.sync() // the first batch reads everything
		return f
	}
	batch := func(f *Feed, i int, full bool) time.Duration {
		f.changed[types.NamespacedName{Namespace: fmt.Sprintf("ns-%d", i%500), Name: fmt.Sprintf("pod-%d", i%pods)}] = true
		f.readAll = full
		start := time.Now()
		f.sync()
		return time.Since(start)
	}
	incrementalFeed, fullFeed := feed(), feed()
	var incremental, full time.Duration
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		incremental += batch(incrementalFeed, i, false)
		full += batch(fullFeed, i, true)
	}
	b.ReportMetric(float64(incremental.Microseconds())/float64(b.N), "µs/incremental-batch")
	b.ReportMetric(float64(full.Microseconds())/float64(b.N), "µs/full-batch")
	b.ReportMetric(float64(full)/float64(max(incremental, 1)), "full/incremental")
}

type discardSink struct{}

func (discardSink) UpdateClusterRules(policy.ClusterBatch) {}
