package clusterpolicy_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/kovs-net/kovs/go-controller/pkg/audit"
	"github.com/kovs-net/kovs/go-controller/pkg/pipeline"
	"github.com/kovs-net/kovs/test/e2e/framework"
)

const (
	floodMeterRate = 500             // the audit meter's rate during the benchmark (a second)
	floodBulkPort  = 5201            // the server's bulk sink, allowed by its NetworkPolicy
	floodBulkTime  = 1 * time.Second // each bulk transfer
	// floodRoundsEnv sets the rounds of each mode (default 2, as make bench-once runs
	// them), interleaved: on, off, off, on, on, off, ...
	floodRoundsEnv = "KOVS_BENCH_AUDIT_ROUNDS"
)

func floodRounds(b *testing.B) int {
	v := os.Getenv(floodRoundsEnv)
	if v == "" {
		return 2
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		b.Fatalf("%s=%q: want a positive number of rounds of each mode", floodRoundsEnv, v)
	}
	return n
}

// BenchmarkAuditFlood measures the audit log under a flood, on a one-node sandbox (real
// ovs-vswitchd, userspace datapath), with and without logging in the same run. aud-fx's
// server is isolated by a NetworkPolicy that allows TCP 80 and 5201; aud-fc/flood sends
// UDP datagrams to the server's port 9, each from a new socket (a new connection, denied
// by the default deny, so each a copy to the agent when aud-fx logs denies), as fast as
// it can, while first aud-fc/flood itself and then aud-fc/other send the server a bulk
// TCP stream on 5201 (the benchmark's own Go code, 256 KiB writes for 1 s each; the rate
// is the bytes the server received over the time from their first to the sender's
// close). The audit meter is set to 500 a second on the switch (what --audit-rate sets).
// A round with logging has aud-fx annotated allow,deny; one without has no annotation
// (no flow of IngressPolicy carries the copy: waited for in br-int); the modes
// alternate, 2 rounds each (on, off, off, on; KOVS_BENCH_AUDIT_ROUNDS=n for n each).
//
// Reported: the flood's new flows a second ("flood-flows/s", per mode); the log's lines
// from the flood a second with logging ("lines/s", counts summed, over the flood's
// duration, once every copy the agent received is in the log) against the meter's rate
// ("lines/meter": above 1 by the burst, the meter's bucket being full when a round
// starts; "lines/meter-past-burst" takes one burst per round off, 1 when the log keeps
// to the meter's rate); the meter's drops; the copies the meter passed that the agent
// never received ("passed-not-received") beside ovs-vswitchd's count of messages dropped
// on a full OpenFlow connection ("rconn-overflow") and the agent's metric of it
// ("connection-dropped"); a round settles once lines + connection drops + unresolved
// copies equal what the meter passed; the bulk rates in Mbit/s of each pod
// with and without logging and their ratios ("flood-pod-log/nolog",
// "other-pod-log/nolog", 1 when logging costs the datapath nothing), means over the
// rounds of each mode. Run it with -benchtime 1x.
func BenchmarkAuditFlood(b *testing.B) {
	env := framework.Require(b)
	s := framework.Up(b, env, "--nodes", "1")
	ctx := framework.Context(b)
	logPath := s.Layout.AuditLog("node1")
	s.EnsureNamespace(b, "aud-fx", nil)
	s.EnsureNamespace(b, "aud-fc", nil)
	s.CreatePod(b, framework.PodSpec{Namespace: "aud-fx", Name: "server", Node: "node1", Labels: map[string]string{"app": "server"}})
	s.CreatePod(b, framework.PodSpec{Namespace: "aud-fc", Name: "flood", Node: "node1"})
	s.CreatePod(b, framework.PodSpec{Namespace: "aud-fc", Name: "other", Node: "node1"})
	tcp := corev1.ProtocolTCP
	p80, pBulk := intstr.FromInt32(80), intstr.FromInt32(floodBulkPort)
	np := &networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: "aud-fx", Name: "server"},
		Spec: networkingv1.NetworkPolicySpec{PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{"app": "server"}},
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress},
			Ingress: []networkingv1.NetworkPolicyIngressRule{{Ports: []networkingv1.NetworkPolicyPort{
				{Protocol: &tcp, Port: &p80}, {Protocol: &tcp, Port: &pBulk}}}}}}
	if _, err := s.Client.NetworkingV1().NetworkPolicies("aud-fx").Create(ctx, np, metav1.CreateOptions{}); err != nil {
		b.Fatal(err)
	}
	server := s.WaitRunning(b, "aud-fx", "server", time.Minute)
	flood := s.WaitRunning(b, "aud-fc", "flood", time.Minute)
	other := s.WaitRunning(b, "aud-fc", "other", time.Minute)
	addr := framework.PodIPs(server)[0]
	sink, err := listenBulk(s.NetNSPath(server))
	if err != nil {
		b.Fatal(err)
	}
	defer sink.close()
	ofctl := func(args ...string) string {
		out, err := exec.Command("ovs-ofctl", append([]string{"-O", "OpenFlow15"}, args...)...).CombinedOutput()
		if err != nil {
			b.Fatalf("ovs-ofctl %v: %v\n%s", args, err, out)
		}
		return string(out)
	}
	meter := func(r int) string {
		return fmt.Sprintf("meter=%d,pktps,burst,band=type=drop,rate=%d,burst_size=%d", pipeline.AuditMeterID, r, r)
	}
	ofctl("mod-meter", s.BrIntTarget("node1"), meter(floodMeterRate))
	meterIn := func() int {
		out := ofctl("meter-stats", s.BrIntTarget("node1"), fmt.Sprintf("meter=%d", pipeline.AuditMeterID))
		m := regexp.MustCompile(`packet_in_count:(\d+)`).FindStringSubmatch(out)
		if m == nil {
			b.Fatalf("meter-stats without packet_in_count:\n%s", out)
		}
		n, _ := strconv.Atoi(m[1])
		return n
	}
	dropped := func() float64 {
		v, err := s.AgentMetric("node1", "kovs_agent_audit_meter_dropped_packets_total", nil)
		if err != nil {
			b.Fatal(err)
		}
		return v
	}
	// setLogging annotates aud-fx (or not) and waits until br-int's IngressPolicy carries
	// the copy on its default deny (or no flow of it carries one).
	setLogging := func(on bool) {
		nsObj, err := s.Client.CoreV1().Namespaces().Get(ctx, "aud-fx", metav1.GetOptions{})
		if err != nil {
			b.Fatal(err)
		}
		if nsObj.Annotations == nil {
			nsObj.Annotations = map[string]string{}
		}
		if on {
			nsObj.Annotations[audit.Annotation] = "allow,deny"
		} else {
			delete(nsObj.Annotations, audit.Annotation)
		}
		if _, err := s.Client.CoreV1().Namespaces().Update(ctx, nsObj, metav1.UpdateOptions{}); err != nil {
			b.Fatal(err)
		}
		framework.Eventually(b, 30*time.Second, fmt.Sprintf("IngressPolicy's copies to the agent %v", on), func() error {
			copies := 0
			for _, f := range s.DumpFlows(b, "node1") {
				if f.Table == int(pipeline.IngressPolicy.ID) && strings.Contains(f.Text, "controller(") &&
					(!on || f.Priority == 50) {
					copies++
				}
			}
			if (copies > 0) != on {
				return fmt.Errorf("%d flows of IngressPolicy copy to the agent", copies)
			}
			return nil
		})
	}
	agentMetric := func(name string) float64 {
		v, err := s.AgentMetric("node1", name, nil)
		if err != nil {
			b.Fatal(err)
		}
		return v
	}
	// overflow is ovs-vswitchd's count of OpenFlow messages it dropped because their
	// connection's queue was full (its coverage counter rconn_overflow), read directly,
	// beside what the agent exports of it.
	overflow := func() int {
		out, err := exec.Command("ovs-appctl", "-t", filepath.Join(s.Layout.OVSDir("node1"), "ovs-vswitchd.ctl"),
			"coverage/read-counter", "rconn_overflow").CombinedOutput()
		if err != nil {
			b.Fatalf("ovs-appctl coverage/read-counter rconn_overflow: %v\n%s", err, out)
		}
		n, err := strconv.Atoi(strings.TrimSpace(string(out)))
		if err != nil {
			b.Fatalf("rconn_overflow: %q", out)
		}
		return n
	}
	fromFlood := func() int {
		return loggedCount(b, logPath, func(r audit.Record) bool { return isFloodLine(r, "aud-fc/flood") })
	}
	allCounts := func() int { return loggedCount(b, logPath, func(audit.Record) bool { return true }) }

	type totals struct {
		floodFlows         int
		floodTime          time.Duration
		floodMbps, othMbps float64
		lines              int
		dropped            float64
		lost, overflow     int
		connDropped        float64
	}
	var on, off, stalled totals
	// round floods once; with stall it stops the agent's monitor (SIGSTOP) for the flood
	// and the bulk transfers, so that ovs-vswitchd's queue to it overflows for certain,
	// and continues it after: the copies lost there must then be counted.
	round := func(logging, stall bool) {
		t := &off
		switch {
		case stall:
			t = &stalled
		case logging:
			t = &on
		}
		linesBefore, floodBefore, inBefore, dropBefore := allCounts(), fromFlood(), meterIn(), dropped()
		recvBefore, unresBefore, overBefore := agentMetric("kovs_agent_audit_packet_ins_total"), agentMetric("kovs_agent_audit_unresolved_total"), overflow()
		connBefore := agentMetric("kovs_agent_audit_connection_dropped_packets_total")
		stop := make(chan struct{})
		var sent atomic.Int64
		var wg sync.WaitGroup
		var floodErr error
		resume := func() {}
		if stall {
			pid := monitorPID(b, s.BrIntTarget("node1"))
			if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
				b.Fatalf("stop the agent's monitor (pid %d): %v", pid, err)
			}
			resume = sync.OnceFunc(func() {
				if err := syscall.Kill(pid, syscall.SIGCONT); err != nil {
					b.Errorf("continue the agent's monitor (pid %d): %v", pid, err)
				}
			})
			defer resume()
		}
		start := time.Now()
		wg.Add(1)
		go func() {
			defer wg.Done()
			floodErr = floodUDP(s.NetNSPath(flood), netip.AddrPortFrom(addr, 9), stop, &sent)
		}()
		fm, err1 := sink.measure(s.NetNSPath(flood), netip.AddrPortFrom(addr, floodBulkPort), floodBulkTime)
		om, err2 := sink.measure(s.NetNSPath(other), netip.AddrPortFrom(addr, floodBulkPort), floodBulkTime)
		close(stop)
		wg.Wait()
		took := time.Since(start)
		resume()
		for _, err := range []error{floodErr, err1, err2} {
			if err != nil {
				b.Fatalf("round (logging %v): %v", logging, err)
			}
		}
		// Every copy the meter passed is a line or counted as missing from it, once the
		// held denies are written: lines since the round began (the bulk connections'
		// allows included, counts summed), plus the copies ovs-vswitchd dropped on the
		// agent's full monitor connection (kovs_agent_audit_connection_dropped_packets_total:
		// it drops a packet-in when that connection has 100 queued), plus the copies the
		// agent could not name, equal what entered the meter less its drops.
		var lines, flooded, received, lost, passed int
		var drop, connDropped, unresolved float64
		framework.Eventually(b, 15*time.Second, "every copy the meter passed logged or counted", func() error {
			lines, flooded, drop = allCounts()-linesBefore, fromFlood()-floodBefore, dropped()-dropBefore
			connDropped = agentMetric("kovs_agent_audit_connection_dropped_packets_total") - connBefore
			unresolved = agentMetric("kovs_agent_audit_unresolved_total") - unresBefore
			passed = meterIn() - inBefore - int(drop)
			if lines+int(connDropped)+int(unresolved) != passed {
				return fmt.Errorf("%d lines since the round began, %.0f copies dropped on the agent's connection and %.0f unresolved, the meter passed %d",
					lines, connDropped, unresolved, passed)
			}
			return nil
		})
		received = int(agentMetric("kovs_agent_audit_packet_ins_total") - recvBefore - unresolved)
		lost = passed - received
		over := overflow() - overBefore
		if float64(over) != connDropped {
			b.Fatalf("ovs-vswitchd's rconn_overflow rose by %d, the agent's connection drops by %.0f", over, connDropped)
		}
		if !logging && lines != 0 {
			b.Fatalf("%d lines without logging", lines)
		}
		t.floodFlows += int(sent.Load())
		t.floodTime += took
		t.floodMbps += fm
		t.othMbps += om
		t.lines += flooded
		t.dropped += drop
		t.lost += lost
		t.overflow += over
		t.connDropped += connDropped
		b.Logf("round, logging %v, monitor stopped %v: %d new flows in %v (%.0f/s), %d lines from the flood, %.0f copies dropped by the meter, "+
			"%d passed by it and not received by the agent (rconn_overflow +%d); bulk from the flooding pod %.0f Mbit/s, from the other pod %.0f Mbit/s",
			logging, stall, sent.Load(), took.Round(time.Millisecond), float64(sent.Load())/took.Seconds(), flooded, drop, lost, over, fm, om)
	}

	rounds := floodRounds(b)
	b.ResetTimer()
	for range b.N {
		on, off = totals{}, totals{}
		for i := range 2 * rounds {
			logging := i%4 == 0 || i%4 == 3
			b.StopTimer()
			setLogging(logging)
			b.StartTimer()
			round(logging, false)
		}
		// Last, a round with logging and the agent's monitor stopped: what ovs-vswitchd
		// drops on its connection is counted, and the log plus that count is still what
		// the meter passed (round's settle condition).
		b.StopTimer()
		setLogging(true)
		round(true, true)
	}
	b.StopTimer()
	if stalled.connDropped == 0 || stalled.lost == 0 {
		b.Errorf("with the agent's monitor stopped during a flood, %.0f copies counted dropped on its connection and %d passed by the meter not received: want both above 0",
			stalled.connDropped, stalled.lost)
	}
	b.ReportMetric(stalled.connDropped, "stalled-connection-dropped")
	if on.floodFlows == 0 || on.dropped == 0 {
		b.Errorf("with logging the meter dropped %.0f copies of %d new flows: the flood did not exceed the meter's %d a second",
			on.dropped, on.floodFlows, floodMeterRate)
	}
	lineRate := float64(on.lines) / on.floodTime.Seconds()
	b.ReportMetric(float64(on.floodFlows)/on.floodTime.Seconds(), "flood-flows/s-log")
	b.ReportMetric(float64(off.floodFlows)/off.floodTime.Seconds(), "flood-flows/s-nolog")
	b.ReportMetric(lineRate, "lines/s")
	b.ReportMetric(floodMeterRate, "meter/s")
	b.ReportMetric(lineRate/floodMeterRate, "lines/meter")
	// The meter's bucket is full (its burst, as many copies as its rate) when a round
	// starts: past it, the meter's rate.
	b.ReportMetric((float64(on.lines)-float64(rounds*floodMeterRate))/on.floodTime.Seconds()/floodMeterRate, "lines/meter-past-burst")
	b.ReportMetric(on.dropped, "meter-dropped")
	b.ReportMetric(float64(on.lost), "passed-not-received")
	b.ReportMetric(float64(on.overflow), "rconn-overflow")
	b.ReportMetric(on.connDropped, "connection-dropped")
	b.ReportMetric(on.floodMbps/float64(rounds), "flood-pod-Mbps-log")
	b.ReportMetric(off.floodMbps/float64(rounds), "flood-pod-Mbps-nolog")
	b.ReportMetric(on.othMbps/float64(rounds), "other-pod-Mbps-log")
	b.ReportMetric(off.othMbps/float64(rounds), "other-pod-Mbps-nolog")
	b.ReportMetric(on.floodMbps/off.floodMbps, "flood-pod-log/nolog")
	b.ReportMetric(on.othMbps/off.othMbps, "other-pod-log/nolog")
	b.ReportMetric(0, "ns/op")
}

// monitorPID is the pid of the agent's `ovs-ofctl monitor` on the bridge at target (the
// one process whose arguments are monitor, target and nxt_packet_in2).
func monitorPID(b *testing.B, target string) int {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		b.Fatal(err)
	}
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		cmdline, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil {
			continue
		}
		args := strings.Split(strings.TrimRight(string(cmdline), "\x00"), "\x00")
		if slices.Contains(args, "monitor") && slices.Contains(args, target) && slices.Contains(args, "nxt_packet_in2") {
			pids = append(pids, pid)
		}
	}
	if len(pids) != 1 {
		b.Fatalf("want the one ovs-ofctl monitor of %s, found pids %v", target, pids)
	}
	return pids[0]
}

// floodUDP sends a datagram from a new socket each (a new connection each) to dst, from
// inside the network namespace, until stop is closed.
func floodUDP(netns string, dst netip.AddrPort, stop <-chan struct{}, sent *atomic.Int64) error {
	return ns.WithNetNSPath(netns, func(ns.NetNS) error {
		to := net.UDPAddrFromAddrPort(dst)
		for i := 0; ; i++ {
			select {
			case <-stop:
				return nil
			default:
			}
			c, err := net.DialUDP("udp4", nil, to)
			if err != nil {
				return err
			}
			_, _ = c.Write([]byte{byte(i)})
			c.Close()
			sent.Add(1)
		}
	})
}

// bulkSink is a TCP server in a pod's network namespace that counts what each connection
// sends until it closes.
type bulkSink struct {
	l       net.Listener
	results chan bulkResult
}

type bulkResult struct {
	bytes       int64
	first, last time.Time
	err         error
}

func listenBulk(netns string) (*bulkSink, error) {
	var l net.Listener
	err := ns.WithNetNSPath(netns, func(ns.NetNS) error {
		var err error
		l, err = net.Listen("tcp4", fmt.Sprintf(":%d", floodBulkPort))
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("listen in %s: %w", netns, err)
	}
	s := &bulkSink{l: l, results: make(chan bulkResult, 1)}
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			var r bulkResult
			buf := make([]byte, 256<<10)
			for {
				n, err := c.Read(buf)
				if n > 0 {
					if r.bytes == 0 {
						r.first = time.Now()
					}
					r.bytes += int64(n)
				}
				if err != nil {
					if err != io.EOF {
						r.err = err
					}
					break
				}
			}
			r.last = time.Now()
			c.Close()
			s.results <- r
		}
	}()
	return s, nil
}

func (s *bulkSink) close() { s.l.Close() }

// measure sends the sink a bulk stream for d from inside netns (the socket is opened
// there; the writes may run on any thread) and returns the rate the sink received it at,
// in Mbit/s.
func (s *bulkSink) measure(netns string, dst netip.AddrPort, d time.Duration) (float64, error) {
	var c net.Conn
	err := ns.WithNetNSPath(netns, func(ns.NetNS) error {
		var err error
		c, err = net.DialTimeout("tcp4", dst.String(), 5*time.Second)
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("connect from %s to %s: %w", netns, dst, err)
	}
	buf := make([]byte, 256<<10)
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	for ctx.Err() == nil {
		if _, err := c.Write(buf); err != nil {
			c.Close()
			return 0, fmt.Errorf("write to %s: %w", dst, err)
		}
	}
	c.Close()
	select {
	case r := <-s.results:
		if r.err != nil || r.bytes == 0 || !r.last.After(r.first) {
			return 0, fmt.Errorf("bulk to %s: %d bytes, %v", dst, r.bytes, r.err)
		}
		return float64(r.bytes) * 8 / r.last.Sub(r.first).Seconds() / 1e6, nil
	case <-time.After(10 * time.Second):
		return 0, fmt.Errorf("bulk to %s: the sink reported nothing 10 s after the sender closed", dst)
	}
}
