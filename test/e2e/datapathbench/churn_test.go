package datapathbench_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"golang.org/x/sys/unix"

	"github.com/kovs-net/kovs/go-controller/pkg/controller/realization"
	"github.com/kovs-net/kovs/test/e2e/framework"
)

const (
	// quietNamespace holds the measured pair, which no policy selects; churnNamespace the
	// pods the changing policy selects.
	quietNamespace = "dpchurn-quiet"
	churnNamespace = "dpchurn-busy"
	churnPolicy    = "churn"
	busyLabel      = "busy"
	// churnInterval is the time between two changes of the policy: 10 a second.
	churnInterval = 100 * time.Millisecond
	// defaultChurnTime is how long the policy changes, and how long the traffic runs
	// without changes for the baseline; churnTimeEnv sets another (make bench-once: 10 s).
	defaultChurnTime = 60 * time.Second
	churnTimeEnv     = "KOVS_BENCH_CHURN_SECONDS"
	// answerTimeout is how long a request waits for its answer before it counts as failed
	// (and its connection is replaced).
	answerTimeout = time.Second
	churnBulkPort = 5211
	churnRRPort   = 5212
)

// churnTime is how long the policy changes during the benchmark.
func churnTime(b *testing.B) time.Duration {
	v := os.Getenv(churnTimeEnv)
	if v == "" {
		return defaultChurnTime
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 2 {
		b.Fatalf("%s=%q: want a whole number of seconds, at least 2", churnTimeEnv, v)
	}
	return time.Duration(n) * time.Second
}

// BenchmarkPolicyChurn measures what policy changes cost traffic they do not concern, on a
// 2-node IPv4 sandbox on the userspace datapath. A pair of pods no policy selects (client
// on node1, server on node2, namespace dpchurn-quiet) carries, at the same time, one bulk
// TCP connection (written 256 KiB at a time) and a request/response loop (64 bytes each
// way, one at a time, each request given 1 s for its answer, after which it counts as
// failed and the loop reconnects). Meanwhile a NetworkPolicy selecting two other pods (one
// on each node, namespace dpchurn-busy) has its allowed port changed every 100 ms, 10 times
// a second, by a merge patch, so each node's agent rewrites its policy tables over and
// over. The traffic runs in four stretches of half the churn time each (60 s in all; see
// churnTimeEnv): quiet, churn, churn, quiet, so load on the shared machine weighs on both
// alike. All of that runs twice in the same sandbox, once for each of the agents'
// --datapath-invalidation values: both agents are restarted with purge (every datapath
// flow dropped after each change, the default before 2026-12-06), measured, then
// restarted with narrow (only the flows that may have met a policy table; the default)
// and measured again.
//
// Reported for the quiet pair, with and without churn: the requests that failed; the TCP
// retransmissions of the loop (both sides) and of the bulk sender, apart (TCP_INFO
// total_retrans: the packets the path lost, or held long enough to be resent; the bulk
// connection's are mostly its own congestion losses, which grow with its throughput); the
// longest time between two answers of the loop and between two reads of the bulk
// receiver (the longest stalls); the answers per second and the bulk throughput; and the
// datapath upcalls of both nodes (a purge of the datapath flows shows there: every flow
// of the quiet pair is set up again); each prefixed with its mode. Then the ratios
// narrow/purge during churn of the upcalls, failed requests, longest gap between answers
// and bulk throughput (none when purge's figure is 0: the log says so). The log adds the
// policy changes made and the generations each agent realized.
func BenchmarkPolicyChurn(b *testing.B) {
	env := framework.Require(b)
	d := churnTime(b)
	s := framework.Up(b, env, "--nodes", "2", "--ip-family", "ipv4")
	s.WaitNodesReady(b)
	nodes := []string{"node1", "node2"}

	s.EnsureNamespace(b, quietNamespace, nil)
	s.EnsureNamespace(b, churnNamespace, nil)
	for i, node := range nodes {
		s.CreatePod(b, framework.PodSpec{Namespace: quietNamespace, Name: []string{"client", "server"}[i], Node: node})
		s.CreatePod(b, framework.PodSpec{Namespace: churnNamespace, Name: "busy-" + node, Node: node,
			Labels: map[string]string{"app": busyLabel}})
	}
	client := s.WaitRunning(b, quietNamespace, "client", podTimeout)
	server := s.WaitRunning(b, quietNamespace, "server", podTimeout)
	for _, node := range nodes {
		s.WaitRunning(b, churnNamespace, "busy-"+node, podTimeout)
	}
	if _, err := s.Client.NetworkingV1().NetworkPolicies(churnNamespace).Create(context.Background(), churnPolicyAt(0), metav1.CreateOptions{}); err != nil {
		b.Fatal(err)
	}
	framework.Eventually(b, realizeTimeout, "the churned policy realized on both nodes", func() error { return churnRealized(s, len(nodes)) })

	srv, err := listenChurn(s.NetNSPath(server))
	if err != nil {
		b.Fatal(err)
	}
	defer srv.close()
	clientNS, addr := s.NetNSPath(client), framework.PodIPs(server)[0]
	ctx := framework.Context(b)

	results := map[string]modeTraffic{}
	changes := 0
	b.ResetTimer()
	for range b.N {
		for _, mode := range invalidationModes {
			b.StopTimer()
			restartAgentsWith(b, s, nodes, mode)
			// Warm-up, unmeasured: the connections' first flows and the listeners' first
			// accepts, through the restarted agents' flows.
			if _, err := srv.run(ctx, clientNS, addr, time.Second); err != nil {
				b.Fatalf("%s: warm-up: %v", mode, err)
			}
			b.StartTimer()
			r := measureMode(b, s, nodes, mode, srv, clientNS, addr, d, &changes)
			b.Logf("%s: quiet pair without churn: %s", mode, r.quiet)
			b.Logf("%s: quiet pair with churn:    %s", mode, r.churned)
			results[mode] = results[mode].add(r)
		}
	}
	b.StopTimer()
	for _, mode := range invalidationModes {
		r := results[mode]
		for _, m := range []struct {
			prefix string
			t      pairTraffic
		}{{mode + "-", r.churned}, {mode + "-quiet-", r.quiet}} {
			b.ReportMetric(float64(m.t.failed), m.prefix+"failed-requests")
			b.ReportMetric(float64(m.t.rrRetrans), m.prefix+"rr-retransmits")
			b.ReportMetric(float64(m.t.bulkRetrans), m.prefix+"bulk-retransmits")
			b.ReportMetric(ms(m.t.rrGap), m.prefix+"ms-longest-answer-gap")
			b.ReportMetric(ms(m.t.bulkGap), m.prefix+"ms-longest-bulk-stall")
			b.ReportMetric(m.t.answersPerSecond(), m.prefix+"answers/s")
			b.ReportMetric(m.t.mbps(), m.prefix+"bulk-Mbit/s")
			b.ReportMetric(m.t.dp.upcalls, m.prefix+"upcalls")
		}
		b.ReportMetric(float64(r.changes)/r.churnTime.Seconds(), mode+"-changes/s")
	}
	// Narrow against purge, during churn, measured in the same run.
	narrow, purge := results[invalidationNarrow].churned, results[invalidationPurge].churned
	var noRatio []string
	for _, q := range []struct {
		name          string
		narrow, purge float64
	}{
		{"upcalls", narrow.dp.upcalls, purge.dp.upcalls},
		{"failed-requests", float64(narrow.failed), float64(purge.failed)},
		{"longest-answer-gap", ms(narrow.rrGap), ms(purge.rrGap)},
		{"bulk-Mbit/s", narrow.mbps(), purge.mbps()},
	} {
		if q.purge == 0 {
			// No ratio to a zero (both 0 is no difference, but say so rather than print 1).
			noRatio = append(noRatio, fmt.Sprintf("%s (narrow %g)", q.name, q.narrow))
			continue
		}
		b.ReportMetric(q.narrow/q.purge, "narrow/purge-"+q.name)
	}
	if len(noRatio) > 0 {
		b.Logf("narrow/purge during churn: no ratio where purge had 0: %s", strings.Join(noRatio, ", "))
	}
}

// The agents' --datapath-invalidation values the benchmark compares: the baseline (purge,
// the old default) first.
const (
	invalidationPurge  = "purge"
	invalidationNarrow = "narrow"
)

var invalidationModes = []string{invalidationPurge, invalidationNarrow}

// modeTraffic is what the quiet pair saw with one --datapath-invalidation.
type modeTraffic struct {
	quiet, churned pairTraffic
	changes        int
	churnTime      time.Duration
}

func (m modeTraffic) add(o modeTraffic) modeTraffic {
	return modeTraffic{quiet: m.quiet.add(o.quiet), churned: m.churned.add(o.churned),
		changes: m.changes + o.changes, churnTime: m.churnTime + o.churnTime}
}

// restartAgentsWith restarts every node's kovs-agent with --datapath-invalidation=mode
// (the sandbox's other flags kept) and returns once each runs with it (its command line
// says so) and has realized the policy generation it received from the controller, and
// the churned policy reads realized on both nodes again.
func restartAgentsWith(b *testing.B, s *framework.Sandbox, nodes []string, mode string) {
	b.Helper()
	for _, n := range nodes {
		proc := n + "-kovs-agent"
		spec, err := s.Layout.ProcessSpec(proc)
		if err != nil {
			b.Fatal(err)
		}
		args := withFlag(spec.Args, "--datapath-invalidation", mode)
		if _, err := s.Layout.RestartAs(proc, spec.Path, args); err != nil {
			b.Fatalf("restart %s with --datapath-invalidation=%s: %v", proc, mode, err)
		}
		s.WaitCommandLine(b, proc, "\x00--datapath-invalidation\x00"+mode+"\x00", "--datapath-invalidation "+mode)
	}
	for _, n := range nodes {
		framework.Eventually(b, realizeTimeout, n+"'s restarted agent realizing its policy", func() error {
			st, err := s.AgentPolicyStatus(n)
			if err != nil {
				return err
			}
			if !st.Received || st.RealizedGeneration < st.ReceivedGeneration {
				return fmt.Errorf("%s: received %v generation %d, realized %d", n, st.Received, st.ReceivedGeneration, st.RealizedGeneration)
			}
			return nil
		})
	}
	framework.Eventually(b, realizeTimeout, "the churned policy realized on both nodes", func() error { return churnRealized(s, len(nodes)) })
}

// withFlag is args with flag set to value: replaced where it is, appended otherwise.
func withFlag(args []string, flag, value string) []string {
	out := slices.Clone(args)
	for i, a := range out {
		if a == flag && i+1 < len(out) {
			out[i+1] = value
			return out
		}
		if strings.HasPrefix(a, flag+"=") {
			out[i] = flag + "=" + value
			return out
		}
	}
	return append(out, flag, value)
}

// measureMode runs the quiet pair's traffic in four stretches of half the churn time
// each (quiet, churn, churn, quiet), the policy changing 10 times a second in the middle
// two; changes counts the policy versions made so far (the next starts after them).
func measureMode(b *testing.B, s *framework.Sandbox, nodes []string, mode string, srv *churnServer, clientNS string, addr netip.Addr, d time.Duration, changes *int) modeTraffic {
	b.Helper()
	ctx := framework.Context(b)
	var m modeTraffic
	var changeErrs int
	var gensBefore []uint64
	for _, churning := range []bool{false, true, true, false} {
		stretch := d / 2
		dp, err := startDP(s, nodes)
		if err != nil {
			b.Fatal(err)
		}
		if churning && gensBefore == nil {
			gensBefore = realizedGenerations(b, s, nodes)
		}
		var wg sync.WaitGroup
		var made, failed int
		if churning {
			wg.Add(1)
			go func() {
				defer wg.Done()
				made, failed = churnPolicyFor(ctx, s, stretch, *changes)
			}()
		}
		t, err := srv.run(ctx, clientNS, addr, stretch)
		wg.Wait()
		if err != nil {
			b.Fatalf("traffic (churn %v): %v", churning, err)
		}
		if t.dp, err = dp.read(); err != nil {
			b.Fatal(err)
		}
		// (Not logged stretch by stretch: go test keeps only the first 10 lines of a
		// benchmark's log, and the per-mode totals and the ratios must be among them.)
		if churning {
			m.churned = m.churned.add(t)
			m.churnTime += stretch
			m.changes += made
			*changes += made
			changeErrs += failed
		} else {
			m.quiet = m.quiet.add(t)
		}
	}
	// The last change must be realized on both nodes: the churn reached the datapath.
	framework.Eventually(b, realizeTimeout, "the last policy change realized on both nodes", func() error { return churnRealized(s, len(nodes)) })
	gensAfter := realizedGenerations(b, s, nodes)
	b.Logf("%s: policy changes: %d made in %s (%d failed); generations realized: node1 %d, node2 %d",
		mode, m.changes, m.churnTime, changeErrs, gensAfter[0]-gensBefore[0], gensAfter[1]-gensBefore[1])
	return m
}

// churnPolicyAt is the churned policy's n-th version: it isolates the busy pods for
// ingress and allows them each other on one port, which changes with n.
func churnPolicyAt(n int) *networkingv1.NetworkPolicy {
	busy := metav1.LabelSelector{MatchLabels: map[string]string{"app": busyLabel}}
	return &networkingv1.NetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{Namespace: churnNamespace, Name: churnPolicy},
		Spec: networkingv1.NetworkPolicySpec{
			PodSelector: busy,
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress},
			Ingress: []networkingv1.NetworkPolicyIngressRule{{
				From:  []networkingv1.NetworkPolicyPeer{{PodSelector: &busy}},
				Ports: []networkingv1.NetworkPolicyPort{{Protocol: ptr.To(corev1.ProtocolTCP), Port: ptr.To(intstr.FromInt(churnPort(n)))}},
			}},
		},
	}
}

// churnPort is the port the policy's n-th version allows: never the same twice in a row.
func churnPort(n int) int { return 7000 + n%100 }

// churnPolicyFor changes the policy's port every churnInterval for d, starting from version
// from+1, and returns the changes made and those that failed. A change that takes longer
// than the interval delays the next (the ticker drops the ticks missed): the log's rate
// says what was reached.
func churnPolicyFor(ctx context.Context, s *framework.Sandbox, d time.Duration, from int) (made, failed int) {
	tick := time.NewTicker(churnInterval)
	defer tick.Stop()
	end := time.After(d)
	for n := from + 1; ; n++ {
		select {
		case <-ctx.Done():
			return made, failed
		case <-end:
			return made, failed
		case <-tick.C:
		}
		patch := fmt.Sprintf(`{"spec":{"ingress":[{"from":[{"podSelector":{"matchLabels":{"app":%q}}}],"ports":[{"protocol":"TCP","port":%d}]}]}}`,
			busyLabel, churnPort(n))
		_, err := s.Client.NetworkingV1().NetworkPolicies(churnNamespace).Patch(ctx, churnPolicy, types.MergePatchType, []byte(patch), metav1.PatchOptions{})
		made++
		if err != nil {
			failed++
		}
	}
}

// churnRealized checks that the churned policy's current version reads realized on all
// the nodes it concerns.
func churnRealized(s *framework.Sandbox, nodes int) error {
	np, err := s.Client.NetworkingV1().NetworkPolicies(churnNamespace).Get(context.Background(), churnPolicy, metav1.GetOptions{})
	if err != nil {
		return err
	}
	value := np.Annotations[realization.AnnotationKey]
	st, err := realization.ParseStatus(value)
	if err != nil {
		return fmt.Errorf("annotation %q: %w", value, err)
	}
	if !st.Complete() || st.Concerned != nodes {
		return fmt.Errorf("annotation %q: want complete on %d nodes", value, nodes)
	}
	return nil
}

// realizedGenerations is each node's agent's realized policy generation.
func realizedGenerations(b *testing.B, s *framework.Sandbox, nodes []string) []uint64 {
	b.Helper()
	var gens []uint64
	for _, n := range nodes {
		st, err := s.AgentPolicyStatus(n)
		if err != nil {
			b.Fatal(err)
		}
		gens = append(gens, st.RealizedGeneration)
	}
	return gens
}

// pairTraffic is what the quiet pair's two connections saw over one or more stretches.
type pairTraffic struct {
	took        time.Duration
	bytes       int64
	bulkGap     time.Duration // the longest time between two reads of the bulk receiver
	answers     int
	failed      int           // requests without an answer within answerTimeout, or whose connection failed
	rrGap       time.Duration // the longest time between two answers (or the stretch's start and the first)
	bulkRetrans uint64        // TCP retransmissions of the bulk sender
	rrRetrans   uint64        // and of the loop's client and server sides
	reconnects  int
	dp          dpStats
}

func (t pairTraffic) add(o pairTraffic) pairTraffic {
	return pairTraffic{took: t.took + o.took, bytes: t.bytes + o.bytes, bulkGap: max(t.bulkGap, o.bulkGap),
		answers: t.answers + o.answers, failed: t.failed + o.failed, rrGap: max(t.rrGap, o.rrGap),
		bulkRetrans: t.bulkRetrans + o.bulkRetrans, rrRetrans: t.rrRetrans + o.rrRetrans, reconnects: t.reconnects + o.reconnects, dp: t.dp.add(o.dp)}
}

func (t pairTraffic) mbps() float64 { return float64(t.bytes) * 8 / t.took.Seconds() / 1e6 }

func (t pairTraffic) answersPerSecond() float64 { return float64(t.answers) / t.took.Seconds() }

func (t pairTraffic) String() string {
	return fmt.Sprintf("bulk %.0f Mbit/s, longest stall %s, %d retransmits; %d answers (%.0f/s), %d failed, %d reconnects, longest gap %s, %d retransmits; datapath %.0f upcalls",
		t.mbps(), t.bulkGap.Round(time.Microsecond), t.bulkRetrans, t.answers, t.answersPerSecond(), t.failed, t.reconnects,
		t.rrGap.Round(time.Microsecond), t.rrRetrans, t.dp.upcalls)
}

// churnServer is the quiet pair's server side: a bulk receiver and a request/response
// echo, in the server pod's namespace, which count their sockets' retransmissions.
type churnServer struct {
	bulk, rr  *net.TCPListener
	rrRetrans atomic.Uint64
	echoes    sync.WaitGroup
}

func listenChurn(netnsPath string) (*churnServer, error) {
	s := &churnServer{}
	var err error
	if s.bulk, err = listenIn(netnsPath, churnBulkPort); err != nil {
		return nil, err
	}
	if s.rr, err = listenIn(netnsPath, churnRRPort); err != nil {
		_ = s.bulk.Close()
		return nil, err
	}
	go s.serveRR()
	return s, nil
}

func (s *churnServer) close() {
	_ = s.bulk.Close()
	_ = s.rr.Close()
}

// serveRR echoes every request of every connection, and adds each connection's
// retransmissions (the answers resent) to rrRetrans when it ends.
func (s *churnServer) serveRR() {
	for {
		conn, err := s.rr.AcceptTCP()
		if err != nil {
			return
		}
		s.echoes.Add(1)
		go func() {
			defer s.echoes.Done()
			defer conn.Close()
			buf := make([]byte, rrSize)
			for {
				// The client sends its next request at once, or gives the connection up
				// after answerTimeout: a longer silence ends the echo, so that run's wait
				// for the echoes is bounded even when the client's close is lost.
				_ = conn.SetReadDeadline(time.Now().Add(10 * answerTimeout))
				if _, err := io.ReadFull(conn, buf); err != nil {
					break
				}
				if _, err := conn.Write(buf); err != nil {
					break
				}
			}
			if n, err := retransmits(conn); err == nil {
				s.rrRetrans.Add(n)
			}
		}()
	}
}

// run carries the bulk connection and the request/response loop from the client namespace
// to the server at addr for d, at the same time.
func (s *churnServer) run(ctx context.Context, clientNS string, addr netip.Addr, d time.Duration) (pairTraffic, error) {
	start := time.Now()
	var t pairTraffic
	var bulkErr error
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		t.bytes, t.bulkGap, t.bulkRetrans, bulkErr = s.bulkFor(ctx, clientNS, addr, d)
	}()
	rr, rrErr := s.loopFor(ctx, clientNS, addr, d)
	wg.Wait()
	if err := errors.Join(bulkErr, rrErr); err != nil {
		return t, err
	}
	s.echoes.Wait() // every echo connection closed: its retransmissions are counted
	t.took = time.Since(start)
	t.answers, t.failed, t.rrGap, t.reconnects = rr.answers, rr.failed, rr.rrGap, rr.reconnects
	t.rrRetrans = rr.retrans + s.rrRetrans.Swap(0)
	return t, nil
}

// bulkFor sends as much as it can for d on one connection and returns the bytes the
// server read, the longest time between two of its reads, and the sender's
// retransmissions.
func (s *churnServer) bulkFor(ctx context.Context, clientNS string, addr netip.Addr, d time.Duration) (bytes int64, gap time.Duration, retrans uint64, err error) {
	r, err := sendBulk(ctx, s.bulk, clientNS, addr, churnBulkPort, d, func(c *net.TCPConn) (err error) {
		retrans, err = retransmits(c)
		return err
	})
	return r.bytes, r.gap, retrans, err
}

// loopResult is what the request/response loop saw.
type loopResult struct {
	answers, failed, reconnects int
	rrGap                       time.Duration
	retrans                     uint64
}

// loopFor makes round trips, one at a time, for d. A request not answered within
// answerTimeout fails, and its connection is replaced by a new one; a connection that
// cannot be made fails a request too.
func (s *churnServer) loopFor(ctx context.Context, clientNS string, addr netip.Addr, d time.Duration) (loopResult, error) {
	var r loopResult
	var conn *net.TCPConn
	closeConn := func() {
		if conn == nil {
			return
		}
		if n, err := retransmits(conn); err == nil {
			r.retrans += n
		}
		_ = conn.Close()
		conn = nil
	}
	defer closeConn()
	req, resp := make([]byte, rrSize), make([]byte, rrSize)
	start := time.Now()
	end := start.Add(d)
	last := start
	for i := 0; time.Now().Before(end); i++ {
		if ctx.Err() != nil {
			return r, ctx.Err()
		}
		if conn == nil {
			c, err := dialFrom(ctx, clientNS, addr, churnRRPort)
			if err != nil {
				r.failed++
				continue
			}
			if i > 0 {
				r.reconnects++
			}
			conn = c
		}
		req[0] = byte(i)
		_ = conn.SetDeadline(time.Now().Add(answerTimeout))
		_, err := conn.Write(req)
		if err == nil {
			_, err = io.ReadFull(conn, resp)
		}
		if err == nil && resp[0] != req[0] {
			return r, fmt.Errorf("round trip %d: answer %d to request %d", i, resp[0], req[0])
		}
		if err != nil {
			r.failed++
			closeConn()
			continue
		}
		now := time.Now()
		r.rrGap = max(r.rrGap, now.Sub(last))
		last = now
		r.answers++
	}
	r.rrGap = max(r.rrGap, time.Since(last))
	if r.answers == 0 {
		return r, fmt.Errorf("no answer in %s (%d requests failed)", d, r.failed)
	}
	return r, nil
}

// retransmits is the socket's TCP retransmissions so far (TCP_INFO total_retrans).
func retransmits(conn *net.TCPConn) (uint64, error) {
	raw, err := conn.SyscallConn()
	if err != nil {
		return 0, err
	}
	var info *unix.TCPInfo
	var serr error
	if err := raw.Control(func(fd uintptr) { info, serr = unix.GetsockoptTCPInfo(int(fd), unix.IPPROTO_TCP, unix.TCP_INFO) }); err != nil {
		return 0, err
	}
	if serr != nil {
		return 0, fmt.Errorf("TCP_INFO: %w", serr)
	}
	return uint64(info.Total_retrans), nil
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
