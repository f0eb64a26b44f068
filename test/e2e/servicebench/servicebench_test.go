// Package servicebench_test measures Service load balancing in br-int (issue 6) in a real
// sandbox: how long an EndpointSlice change takes to reach traffic, and what a Service
// and one endpoint change cost in OpenFlow, with 1 and with 1,000 Services of 10
// endpoints each in place. Needs root; runs under `make bench` (KOVS_E2E=1).
package servicebench_test

import (
	"fmt"
	"net/netip"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/kovs-net/kovs/test/e2e/framework"
)

const (
	// endpointsPerService is the size of every Service, the measured one included.
	endpointsPerService = 10
	// samplesPerSize endpoint additions are timed per size: p99 (nearest rank) of 20 is
	// the slowest but one.
	samplesPerSize = 20
	sampleTimeout  = 30 * time.Second
	// probers open new connections to the ClusterIP in parallel while a sample waits; the
	// new backend gets 1 in 11 of them, so the detection lag is a few ms.
	probers      = 4
	probeAttempt = 250 * time.Millisecond
	// programTimeout bounds how long the background Services may take to show in OVS.
	programTimeout = 5 * time.Minute
)

// serviceCounts are the numbers of Services in place (the measured one included).
var serviceCounts = []int{1, 1000}

// BenchmarkServiceEndpointChange measures, on a 2-node IPv4 sandbox, with 1 and then
// 1,000 Services of 10 endpoints each in place (sub-benchmarks services=1, services=1000):
//
//   - ms-to-traffic-p50/-p99: from the Update of an EndpointSlice that adds a new real
//     backend to the measured Service returning, to the first new connection through the
//     Service's ClusterIP that this backend answers (4 probers opening connections
//     back to back from a pod on node1; the backend is on node2). The measured Service
//     (selector-less, hand-written slice) has 10 real pods as endpoints; the background
//     Services are selector-less with 10 endpoints each at addresses in the cluster CIDR
//     no node owns (nothing needs to answer there). After each sample the backend is
//     removed again, untimed, and the next sample starts once it gets no connections.
//   - flows-per-service, groups-per-service: node1's kovs-owned flows and its groups
//     with 1,000 Services minus with 1, over the 999 added (reported by services=1000).
//   - ovs-flow-changes, ovs-group-changes: for one endpoint addition, the flows and groups
//     of node1 that differ (added, removed or rewritten) before and after, read with
//     ovs-ofctl dump-flows/dump-groups: what the agent's bundle had to carry at least.
//   - agent-flow-mods, ms-agent-sync: the added+deleted counts and the took= times
//     kovs-agent logs for the flow syncs of that change on node1 (its bundle size and
//     sync time, as the agent reports them).
//
// Run with -run '^$' -bench . -benchtime 1x: one iteration is the whole series.
func BenchmarkServiceEndpointChange(b *testing.B) {
	env := framework.Require(b)
	s := framework.Up(b, env, "--nodes", "2", "--ip-family", "ipv4")
	c := newBench(b, s)
	var oneService ovsCount
	for _, size := range serviceCounts {
		b.Run(fmt.Sprintf("services=%d", size), func(b *testing.B) {
			c.ensureBackground(b, size-1)
			count := c.waitOVSSettled(b, "node1")
			b.Logf("node1 with %d Services: %d kovs flows (by cookie category %v), %d groups", size, count.flows, count.byCategory, count.groups)
			if size == 1 {
				oneService = count
			}
			var samples []time.Duration
			for b.Loop() {
				for len(samples) < samplesPerSize {
					d := c.sample(b, len(samples) == 0)
					samples = append(samples, d)
				}
			}
			// b.Loop resets the reported metrics when it starts: report after it.
			if size > 1 && oneService.flows > 0 {
				added := float64(size - 1)
				b.ReportMetric(float64(count.flows-oneService.flows)/added, "flows-per-service")
				b.ReportMetric(float64(count.groups-oneService.groups)/added, "groups-per-service")
			}
			slices.Sort(samples)
			b.Logf("ms to traffic, sorted: %v", msList(samples))
			b.ReportMetric(ms(nearestRank(samples, 50)), "ms-to-traffic-p50")
			b.ReportMetric(ms(nearestRank(samples, 99)), "ms-to-traffic-p99")
		})
	}
}

// sample adds the spare backend to the measured Service, times how long until it answers
// through the ClusterIP, then removes it (untimed). With costs, it also measures what the
// change did to node1's OpenFlow tables.
func (c *bench) sample(b *testing.B, costs bool) time.Duration {
	var before ovsState
	var logOffset int64
	if costs {
		before = c.dumpOVS(b, "node1")
		logOffset = c.agentLogSize("node1")
	}
	stop := c.startProbers(b)
	start := time.Now()
	c.writeProbeSlice(b, true)
	updated := time.Since(start)
	var took time.Duration
	select {
	case at := <-stop.answered:
		took = at.Sub(start) - updated
	case <-time.After(sampleTimeout):
		stop.cancel()
		b.Fatalf("the backend added to the EndpointSlice of %s received no connection through %s within %s (probes: %s)",
			"probe", c.clusterIP, sampleTimeout, stop.summary())
	}
	stop.cancel()
	if costs {
		time.Sleep(2 * time.Second) // let every sync of the change finish
		after := c.dumpOVS(b, "node1")
		flows, groups := before.diff(after)
		mods, syncTook, syncs := c.agentSyncs("node1", logOffset)
		b.Logf("one endpoint added: %d flows and %d groups of node1 differ; kovs-agent logged %d flow mods in %d syncs: %v",
			flows, groups, mods, len(syncs), syncs)
		b.ReportMetric(float64(flows), "ovs-flow-changes")
		b.ReportMetric(float64(groups), "ovs-group-changes")
		b.ReportMetric(float64(mods), "agent-flow-mods")
		b.ReportMetric(ms(syncTook), "ms-agent-sync")
	}
	c.writeProbeSlice(b, false)
	c.waitSpareDrained(b)
	return took
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func msList(ds []time.Duration) []string {
	var out []string
	for _, d := range ds {
		out = append(out, fmt.Sprintf("%.1f", ms(d)))
	}
	return out
}

// nearestRank is the p-th percentile of sorted by the nearest-rank method.
func nearestRank(sorted []time.Duration, p int) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := (p*len(sorted)+99)/100 - 1
	return sorted[max(i, 0)]
}

// backgroundService is the i-th background Service: selector-less, 80/tcp to 8080.
func backgroundService(ns string, i int) *corev1.Service {
	return &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("bg-%d", i)},
		Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromInt32(8080), Protocol: corev1.ProtocolTCP}}}}
}

// backgroundEndpoints are the 10 endpoints of background Service i: addresses in
// 10.244.64.0/18, in the cluster CIDR but in no node's block, alternately "on" each node.
func backgroundEndpoints(i int) []framework.SliceEndpoint {
	base := netip.MustParseAddr("10.244.64.0").As4()
	var eps []framework.SliceEndpoint
	for j := range endpointsPerService {
		n := i*endpointsPerService + j + 1
		a := base
		a[2] += byte(n >> 8)
		a[3] = byte(n)
		eps = append(eps, framework.SliceEndpoint{Addr: netip.AddrFrom4(a), Node: fmt.Sprintf("node%d", j%2+1),
			Ready: true, Serving: true})
	}
	return eps
}

var backgroundPorts = []discoveryv1.EndpointPort{framework.EndpointPort("http", 8080, corev1.ProtocolTCP)}
