// Package datapathbench_test measures what kovs's br-int pipeline costs the datapath: bulk
// TCP throughput and request/response latency between pods on two nodes of a sandbox,
// against a bare OVS bridge (one NORMAL flow, a Geneve tunnel) on the same nodes' own
// ovs-vswitchd, in the same run. Needs root; runs under `make bench` (KOVS_E2E=1).
package datapathbench_test

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/kovs-net/kovs/test/e2e/framework"
)

const (
	// rounds of each kind, interleaved (kovs, bare, bare, kovs, kovs, bare, ...): each
	// round is a bulk transfer of bulkTime and rrTrips round trips.
	rounds      = 5
	bulkTime    = 2 * time.Second
	rrWarm      = 200
	rrTrips     = 2000
	warmBulk    = 500 * time.Millisecond
	hotDPPacket = 1000 // datapath flows logged: those that carried at least this many packets
)

// path is one of the two measured paths: a client namespace on node1 and a server on
// node2.
type path struct {
	name     string
	clientNS string
	srv      *server
	addr     netip.Addr
	rounds   int // bulk transfers so far, the warm-up's included
}

// sample is one round of one path.
type sample struct {
	mbps   float64
	rrP50  time.Duration
	rrP99  time.Duration
	bulkDP dpStats // the datapath counters of both nodes during the bulk transfer
	rrDP   dpStats // and during the round trips
	flows  string  // both nodes' busiest datapath flows right after the bulk transfer
}

// BenchmarkDatapathThroughput measures, on a 2-node IPv4 sandbox on the userspace datapath,
// bulk TCP throughput and request/response latency from a pod on node1 to a pod on node2
// through kovs's whole br-int pipeline, with 100 NetworkPolicies (all selecting one of the
// two pods, all allowing the traffic; a port none allows is checked to be refused) and 100
// Services (the server their endpoint) in place, against the baseline: a namespace on each
// node with a veth of the same MTU and offloads into a bare OVS bridge of the same
// ovs-vswitchd, one NORMAL flow, and a Geneve port (kovs's VNI, the same underlay).
//
// Traffic is the benchmark's own Go code, both ends in sockets it opens inside the
// namespaces: bulk is one connection written 256 KiB at a time for 2 s, its throughput the
// bytes received over the time from the first byte to the sender's close; request/response
// is one connection, 200 unmeasured then 2,000 measured round trips of 64 bytes each way,
// one at a time. The two paths alternate, 5 rounds each in the order kovs, bare, bare,
// kovs, kovs, bare, after an unmeasured warm-up of each, so load on the shared machine
// weighs on both alike.
//
// Reported: the medians over the rounds of throughput (Mbit/s) and of the round trips' p50
// (µs) for each path; throughput_ratio and latency_ratio, the medians over the rounds of
// kovs/bare within the round (the goals: at least 0.95, at most 1.1); and, from both
// nodes' datapath counters (dpif-netdev/pmd-stats-show, cleared before each measurement)
// and ovs-vswitchd processes (/proc), the datapath passes and the ovs-vswitchd CPU time
// per packet of each path during the bulk transfers. The log has every round and the
// busiest datapath flows of each node after each path's last transfer, and kovsctl's trace
// of an established packet. With KOVS_BENCH_DATAPATH_PERF=<dir>, perf record profiles
// both ovs-vswitchd during every bulk transfer into <dir>/<path>-<n>.data (n 1 is the
// warm-up). Run with -benchtime 1x (make bench does): one iteration is all the rounds.
func BenchmarkDatapathThroughput(b *testing.B) {
	env := framework.Require(b)
	s := framework.Up(b, env, "--nodes", "2", "--ip-family", "ipv4")
	s.WaitNodesReady(b)
	nodes := []string{"node1", "node2"}
	k := setUpKovs(b, s)
	checkIsolated(b, k)
	bn := setUpBare(b, s, nodes, k.mtu, k.txOff)
	b.Logf("pod MTU %d, TX checksum offload off: %v", k.mtu, k.txOff)

	kovsSrv, err := listen(k.serverNS)
	if err != nil {
		b.Fatal(err)
	}
	defer kovsSrv.close()
	bareSrv, err := listen(bn.netns[1])
	if err != nil {
		b.Fatal(err)
	}
	defer bareSrv.close()
	kovs := &path{name: "kovs", clientNS: k.clientNS, srv: kovsSrv, addr: k.serverAddr}
	base := &path{name: "bare", clientNS: bn.netns[0], srv: bareSrv, addr: bn.addrs[1]}
	ctx := framework.Context(b)
	for _, p := range []*path{kovs, base} {
		if _, err := p.round(ctx, s, nodes, warmBulk, rrWarm); err != nil {
			b.Fatalf("%s warm-up: %v", p.name, err)
		}
	}

	results := map[string][]sample{}
	b.ResetTimer()
	for range b.N {
		for r := range rounds {
			order := []*path{kovs, base}
			if r%2 == 1 {
				order = []*path{base, kovs}
			}
			for _, p := range order {
				sm, err := p.round(ctx, s, nodes, bulkTime, rrTrips)
				if err != nil {
					b.Fatalf("%s round %d: %v", p.name, r+1, err)
				}
				results[p.name] = append(results[p.name], sm)
				b.Logf("round %d %s: bulk %.0f Mbit/s (%s); round trip p50 %.1f µs p99 %.1f µs (%s)",
					r+1, p.name, sm.mbps, sm.bulkDP, us(sm.rrP50), us(sm.rrP99), sm.rrDP)
			}
		}
	}
	b.StopTimer()
	report(b, results["kovs"], results["bare"])
	for _, p := range []string{"kovs", "bare"} {
		b.Logf("after the last %s bulk transfer:\n%s", p, results[p][len(results[p])-1].flows)
	}
	logTrace(b, env, s)
}

// logTrace logs the OpenFlow path of an established bulk packet from the client to the
// server on both nodes, as kovsctl traces it.
func logTrace(b *testing.B, env framework.Env, s *framework.Sandbox) {
	ovsDir := strings.ReplaceAll(s.Layout.OVSDir("NODE"), "NODE", "{node}")
	cmd := exec.Command(filepath.Join(env.BinDir, "kovsctl"), "--kubeconfig", s.Layout.Kubeconfig(), "--ovs-dir", ovsDir,
		"trace", benchNamespace+"/client", benchNamespace+"/server", "--port", strconv.Itoa(bulkPort), "--ct-state", "trk,est")
	out, err := cmd.CombinedOutput()
	if err != nil {
		b.Errorf("kovsctl trace: %v\n%s", err, out)
		return
	}
	b.Logf("an established bulk packet, client to server (kovsctl trace --ct-state trk,est):\n%s", out)
}

// round measures one bulk transfer of d and rr round trips on the path, with the datapath
// counters of each.
func (p *path) round(ctx context.Context, s *framework.Sandbox, nodes []string, d time.Duration, trips int) (sample, error) {
	var sm sample
	dp, err := startDP(s, nodes)
	if err != nil {
		return sm, err
	}
	p.rounds++
	stopPerf, err := startPerf(s, nodes, fmt.Sprintf("%s-%d", p.name, p.rounds))
	if err != nil {
		return sm, err
	}
	r, err := bulk(ctx, p.srv, p.clientNS, p.addr, d)
	if perr := stopPerf(); perr != nil {
		// A profile is an investigation aid: losing one does not void the measurement.
		fmt.Fprintf(os.Stderr, "%s: %v\n", p.name, perr)
	}
	if err != nil {
		return sm, fmt.Errorf("bulk: %w", err)
	}
	sm.mbps = r.Mbps()
	if sm.bulkDP, err = dp.read(); err != nil {
		return sm, err
	}
	if sm.flows, err = hotFlows(s, nodes); err != nil {
		return sm, err
	}
	if dp, err = startDP(s, nodes); err != nil {
		return sm, err
	}
	rr, err := requestResponse(ctx, p.clientNS, p.addr, rrWarm, trips)
	if err != nil {
		return sm, fmt.Errorf("request/response: %w", err)
	}
	sm.rrP50, sm.rrP99 = rr.p(50), rr.p(99)
	if sm.rrDP, err = dp.read(); err != nil {
		return sm, err
	}
	return sm, nil
}

// report publishes the medians of both paths and their ratios. A ratio is the median of
// the rounds' own ratios (each round measures both paths back to back, so a change of the
// machine's load between rounds cancels out); the ratio of the medians is logged beside it.
func report(b *testing.B, kovs, bare []sample) {
	mbps := func(s sample) float64 { return s.mbps }
	p50 := func(s sample) float64 { return us(s.rrP50) }
	passes := func(s sample) float64 { return s.bulkDP.passesPerPacket() }
	cpu := func(s sample) float64 { return s.bulkDP.cpuPerPacket() }
	rrCPU := func(s sample) float64 { return s.rrDP.cpuPerPacket() }
	throughput, latency := medianRatio(kovs, bare, mbps), medianRatio(kovs, bare, p50)
	b.ReportMetric(median(kovs, mbps), "kovs-Mbit/s")
	b.ReportMetric(median(bare, mbps), "bare-Mbit/s")
	b.ReportMetric(throughput, "throughput_ratio")
	b.ReportMetric(median(kovs, p50), "kovs-rr-p50-µs")
	b.ReportMetric(median(bare, p50), "bare-rr-p50-µs")
	b.ReportMetric(latency, "latency_ratio")
	b.ReportMetric(median(kovs, passes), "kovs-dp-passes/pkt")
	b.ReportMetric(median(bare, passes), "bare-dp-passes/pkt")
	b.ReportMetric(median(kovs, cpu), "kovs-vswitchd-ns/pkt")
	b.ReportMetric(median(bare, cpu), "bare-vswitchd-ns/pkt")
	var t strings.Builder
	fmt.Fprintf(&t, "medians of %d rounds each (passes and ovs-vswitchd CPU per packet: both nodes, bulk and rr):\n", len(kovs))
	fmt.Fprintf(&t, "  %-5s %10s %12s %12s %14s %14s\n", "", "Mbit/s", "rr p50 µs", "passes/pkt", "CPU ns/pkt", "rr CPU ns/pkt")
	for _, row := range []struct {
		name string
		ss   []sample
	}{{"kovs", kovs}, {"bare", bare}} {
		fmt.Fprintf(&t, "  %-5s %10.0f %12.1f %12.2f %14.0f %14.0f\n", row.name, median(row.ss, mbps), median(row.ss, p50),
			median(row.ss, passes), median(row.ss, cpu), median(row.ss, rrCPU))
	}
	fmt.Fprintf(&t, "  kovs/bare, median of the rounds' ratios: throughput %.3fx (goal >= 0.95), latency %.3fx (goal <= 1.1)\n", throughput, latency)
	fmt.Fprintf(&t, "  kovs/bare, ratio of the medians: throughput %.3fx, latency %.3fx",
		median(kovs, mbps)/median(bare, mbps), median(kovs, p50)/median(bare, p50))
	b.Log(t.String())
}

// median is the median of f over the samples (the lower one of an even count).
func median(ss []sample, f func(sample) float64) float64 {
	v := make([]float64, len(ss))
	for i, s := range ss {
		v[i] = f(s)
	}
	return lowerMedian(v)
}

// medianRatio is the median over the rounds of f(kovs)/f(bare) within the round.
func medianRatio(kovs, bare []sample, f func(sample) float64) float64 {
	v := make([]float64, len(kovs))
	for i := range kovs {
		v[i] = f(kovs[i]) / f(bare[i])
	}
	return lowerMedian(v)
}

func lowerMedian(v []float64) float64 {
	slices.Sort(v)
	return v[(len(v)-1)/2]
}

// hotFlows describes each node's datapath flow count and its busiest flows: which passes
// a path's packets take (recirc_id, ct(), tnl_pop) and how wide their matches are.
func hotFlows(s *framework.Sandbox, nodes []string) (string, error) {
	var t strings.Builder
	for _, node := range nodes {
		total, hot, err := hotDPFlows(s, node, hotDPPacket)
		if err != nil {
			return "", err
		}
		fmt.Fprintf(&t, "%s: %d datapath flows, %d with at least %d packets:\n", node, total, len(hot), hotDPPacket)
		for _, f := range hot[:min(len(hot), 16)] {
			fmt.Fprintf(&t, "  %s\n", f.text)
		}
	}
	return strings.TrimSuffix(t.String(), "\n"), nil
}

func us(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }
