package ovsbench

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sirupsen/logrus"
	"golang.org/x/sys/unix"

	"github.com/kovs-net/kovs/go-controller/pkg/agent"
	"github.com/kovs-net/kovs/go-controller/pkg/ovs"
)

// BenchmarkAgentResync is issue 17's periodic resync at 1,000 pods and 1,000 policies: the
// node of BenchmarkAgentPolicyInstall (same share, pods and peers), installed on a real
// br-int by the agent's own syncer, then resynced with nothing changed, b.N times.
//
//   - full: a full resync (FlowSyncer.TriggerFull: compile, dump every flow and group
//     kovs installed, diff), what every periodic resync did before issue 17, and what
//     one does every --full-resync-period (5 min) now;
//   - periodic: the periodic resync in between (FlowSyncer.Resync, every --resync-period,
//     10 s): one count of kovs's flows on the switch, no compilation while nothing
//     changed.
//
// periodic also reports cpu-ms/min, the CPU a minute at kovs-agent's defaults (6 resyncs
// a minute, one full every 5 minutes; from both sub-benchmarks' totals), against
// cpu-ms/min-all-full, a full resync every 10 s as before issue 17.
//
// Reported per resync: agent-cpu-ms (the benchmark process's user+system CPU, getrusage,
// which runs the syncer and nothing else meanwhile), ofctl-cpu-ms (the ovs-ofctl
// processes it ran, RUSAGE_CHILDREN), vswitchd-cpu-ms (ovs-vswitchd's utime+stime from
// /proc/<pid>/stat, 10 ms ticks: summed over the whole loop, so run at least 20
// iterations, -benchtime 20x), flows-dumped, KB-read (ovs-ofctl's output the syncer read)
// and the wall time of its phases (ms-compile, ms-read: dumps and counts). Each CPU
// figure is the whole loop's total over b.N, so the idle time between resyncs (the
// syncer's 20 ms pause) is in it: vswitchd-idle-cpu-ms is ovs-vswitchd's CPU over the
// same wall time with no resync, to subtract. Needs root and OVS.
func BenchmarkAgentResync(b *testing.B) {
	level := logrus.GetLevel()
	logrus.SetLevel(logrus.WarnLevel)
	b.Cleanup(func() { logrus.SetLevel(level) })
	n := newBenchNode(b)
	var full resyncCost
	b.Run("full", func(b *testing.B) { full = n.benchResync(b, (*agent.FlowSyncer).TriggerFull) })
	b.Run("periodic", func(b *testing.B) {
		periodic := n.benchResync(b, (*agent.FlowSyncer).Resync)
		if full.total() > 0 {
			perMinute(b, full, periodic)
		}
	})
}

// perMinute reports the CPU a minute at kovs-agent's defaults (a resync every 10 s, one of
// them full every DefaultFullResyncPeriod) and with every resync full, as before issue 17.
func perMinute(b *testing.B, full, periodic resyncCost) {
	const resyncs = 6.0 // --resync-period 10s
	fulls := resyncs * float64(10*time.Second) / float64(agent.DefaultFullResyncPeriod)
	mix := func(f func(resyncCost) float64) float64 { return fulls*f(full) + (resyncs-fulls)*f(periodic) }
	before, after := resyncs*full.total(), mix(resyncCost.total)
	b.ReportMetric(after, "cpu-ms/min")
	b.ReportMetric(before, "cpu-ms/min-all-full")
	b.Logf("CPU a minute at the defaults (a resync every 10 s, a full one every %s): %.0f ms (agent %.0f, ovs-ofctl %.0f, ovs-vswitchd %.0f above idle); every resync full, as before: %.0f ms (%.1fx); a periodic resync costs %.0f%% of a full one",
		agent.DefaultFullResyncPeriod, after, mix(func(r resyncCost) float64 { return r.agent }),
		mix(func(r resyncCost) float64 { return r.ofctl }),
		mix(func(r resyncCost) float64 { return max(0, r.vswitchd-r.vswitchdIdle) }),
		before, before/after, 100*periodic.total()/full.total())
}

// benchResync installs the node with the agent's syncer and measures b.N resyncs that
// trigger starts, with nothing changed: none may apply a bundle.
func (n *benchNode) benchResync(b *testing.B, trigger func(*agent.FlowSyncer)) resyncCost {
	rig, _ := startBrInt(b)
	reads := &readCounter{}
	of, err := ovs.NewOpenFlow(ovs.OpenFlowConfig{Bridge: "br-int", RunDir: rig.Dir, VswitchdCtl: rig.VswitchdCtl, Exec: reads})
	if err != nil {
		b.Fatal(err)
	}
	a := startAgent(b, &recordingSwitch{of: of}, n.pods, n.peers, n.share)
	a.resync(b, trigger) // one unmeasured resync: whatever the first one leaves to do is done
	a.reset()
	reads.reset()
	vswitchd := rig.VswitchdPID()
	before := sampleCPU(b, vswitchd)
	start := time.Now()
	for b.Loop() {
		a.resync(b, trigger)
	}
	wall := time.Since(start)
	after := sampleCPU(b, vswitchd)
	b.StopTimer()
	idle := idleVswitchdCPU(b, vswitchd, wall)
	if _, err := a.syncer.Synced(); err != nil {
		b.Fatalf("resync: %v", err)
	}
	sw := a.sw.stats()
	if sw.applies != 0 {
		b.Errorf("%d idle resyncs applied %d bundles (%d deletes, %d adds); nothing changed", b.N, sw.applies, sw.deletes, sw.adds)
	}
	_, compile := a.compile.times()
	per := func(v float64) float64 { return v / float64(b.N) }
	r := resyncCost{
		agent: per(ms(after.self - before.self)), ofctl: per(ms(after.children - before.children)),
		vswitchd: per(ms(after.vswitchd - before.vswitchd)), vswitchdIdle: per(ms(idle)),
		flows: per(float64(sw.dumped)), kb: per(float64(reads.bytes()) / 1024),
	}
	b.ReportMetric(r.agent, "agent-cpu-ms")
	b.ReportMetric(r.ofctl, "ofctl-cpu-ms")
	b.ReportMetric(r.vswitchd, "vswitchd-cpu-ms")
	b.ReportMetric(r.vswitchdIdle, "vswitchd-idle-cpu-ms")
	b.ReportMetric(r.flows, "flows-dumped")
	b.ReportMetric(r.kb, "KB-read")
	b.ReportMetric(per(ms(compile)), "ms-compile")
	b.ReportMetric(per(ms(sw.read)), "ms-read")
	b.Logf("%d idle resyncs: per resync agent %.1f ms CPU + ovs-ofctl %.1f ms, ovs-vswitchd %.1f ms (%.1f idle over the same time); %.0f flows dumped, %.0f KB read; compile %.1f ms, dumps %.1f ms (wall); at 6 a minute: %.0f ms of CPU a minute",
		b.N, r.agent, r.ofctl, r.vswitchd, r.vswitchdIdle, r.flows, r.kb, per(ms(compile)), per(ms(sw.read)), 6*r.total())
	return r
}

// resyncCost is what one resync costs, in ms of CPU (and flows, KB).
type resyncCost struct {
	agent, ofctl, vswitchd, vswitchdIdle float64
	flows, kb                            float64
}

// total is the CPU of one resync: the agent, its ovs-ofctl runs and ovs-vswitchd's share
// above its idle.
func (r resyncCost) total() float64 {
	return r.agent + r.ofctl + max(0, r.vswitchd-r.vswitchdIdle)
}

// resync runs one resync with trigger and waits until it succeeded.
func (a *agentRig) resync(b *testing.B, trigger func(*agent.FlowSyncer)) {
	select {
	case <-a.synced: // a token of an earlier sync
	default:
	}
	trigger(a.syncer)
	select {
	case <-a.synced:
	case <-time.After(syncTimeout):
		b.Fatalf("no flow sync within %s", syncTimeout)
	}
}

// cpuSample is the process's CPU, its reaped children's, and ovs-vswitchd's.
type cpuSample struct{ self, children, vswitchd time.Duration }

func sampleCPU(b *testing.B, vswitchd int) cpuSample {
	var self, children unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_SELF, &self); err != nil {
		b.Fatal(err)
	}
	if err := unix.Getrusage(unix.RUSAGE_CHILDREN, &children); err != nil {
		b.Fatal(err)
	}
	tv := func(u unix.Rusage) time.Duration {
		return time.Duration(u.Utime.Nano() + u.Stime.Nano())
	}
	return cpuSample{self: tv(self), children: tv(children), vswitchd: processCPU(b, vswitchd)}
}

// processCPU is a process's utime+stime (/proc/<pid>/stat, in clock ticks of 10 ms).
func processCPU(b *testing.B, pid int) time.Duration {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		b.Fatal(err)
	}
	// The command (field 2) is in parentheses and may hold spaces: count from after it.
	_, rest, ok := strings.Cut(string(stat), ") ")
	f := strings.Fields(rest)
	if !ok || len(f) < 13 {
		b.Fatalf("/proc/%d/stat: %q", pid, stat)
	}
	utime, err1 := strconv.ParseInt(f[11], 10, 64) // field 14
	stime, err2 := strconv.ParseInt(f[12], 10, 64) // field 15
	if err1 != nil || err2 != nil {
		b.Fatalf("/proc/%d/stat: %q", pid, stat)
	}
	return time.Duration(utime+stime) * (time.Second / 100) // USER_HZ is 100 on Linux
}

// idleVswitchdCPU is ovs-vswitchd's CPU over wall with nothing asked of it.
func idleVswitchdCPU(b *testing.B, pid int, wall time.Duration) time.Duration {
	before := processCPU(b, pid)
	time.Sleep(wall)
	return processCPU(b, pid) - before
}

// readCounter runs commands (ovs.OSExec) and counts the bytes they wrote to stdout: what
// the syncer read from the switch.
type readCounter struct {
	mu sync.Mutex
	n  int
}

func (r *readCounter) Run(ctx context.Context, cmd ovs.Command) ([]byte, []byte, error) {
	stdout, stderr, err := ovs.OSExec{}.Run(ctx, cmd)
	r.mu.Lock()
	r.n += len(stdout)
	r.mu.Unlock()
	return stdout, stderr, err
}

func (r *readCounter) bytes() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.n
}

func (r *readCounter) reset() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.n = 0
}
