package datapathbench_test

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/kovs-net/kovs/go-controller/pkg/sandbox"
	"github.com/kovs-net/kovs/test/e2e/framework"
)

// appctl runs ovs-appctl against a node's ovs-vswitchd.
func appctl(s *framework.Sandbox, node string, args ...string) (string, error) {
	ctl := sandbox.OVSVswitchdCtl(s.Layout, node)
	out, err := exec.Command("ovs-appctl", append([]string{"-t", ctl}, args...)...).CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("ovs-appctl %s on %s: %w: %s", strings.Join(args, " "), node, err, out)
	}
	return string(out), nil
}

// dpStats is what the userspace datapath counted over one measurement, summed over its
// threads (dpif-netdev/pmd-stats-show) and both nodes: every packet a port received, the
// extra datapath passes recirculation (ct(), tunnel decapsulation) gave them, how the
// passes were classified; and the CPU time the ovs-vswitchd processes used meanwhile
// (/proc: the userspace datapath's non-PMD thread, which polls the veths and does all
// the forwarding here, counts no cycles of its own).
type dpStats struct {
	packets, recirculations float64
	emcHits, smcHits        float64
	megaflowHits, upcalls   float64
	cpu                     time.Duration
}

// passesPerPacket is the average number of datapath passes of a received packet.
func (d dpStats) passesPerPacket() float64 {
	if d.packets == 0 {
		return 0
	}
	return (d.packets + d.recirculations) / d.packets
}

// cpuPerPacket is ovs-vswitchd's CPU time per received packet, in ns.
func (d dpStats) cpuPerPacket() float64 {
	if d.packets == 0 {
		return 0
	}
	return float64(d.cpu.Nanoseconds()) / d.packets
}

// String is the counters in short: packets, passes per packet, how the passes were
// classified, and CPU per packet.
func (d dpStats) String() string {
	return fmt.Sprintf("%.0f packets, %.2f passes/pkt, emc %.0f smc %.0f megaflow %.0f upcall %.0f, ovs-vswitchd %s CPU, %.0f ns/pkt",
		d.packets, d.passesPerPacket(), d.emcHits, d.smcHits, d.megaflowHits, d.upcalls, d.cpu, d.cpuPerPacket())
}

func (d dpStats) add(o dpStats) dpStats {
	return dpStats{d.packets + o.packets, d.recirculations + o.recirculations, d.emcHits + o.emcHits,
		d.smcHits + o.smcHits, d.megaflowHits + o.megaflowHits, d.upcalls + o.upcalls, d.cpu + o.cpu}
}

var pmdStatLine = regexp.MustCompile(`^\s*([a-z. ]+):\s*([0-9]+)`)

// parsePMDStats sums the counters of every thread in pmd-stats-show output.
func parsePMDStats(out string) dpStats {
	var d dpStats
	for _, line := range strings.Split(out, "\n") {
		m := pmdStatLine.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		v, _ := strconv.ParseFloat(m[2], 64)
		switch m[1] {
		case "packets received":
			d.packets += v
		case "packet recirculations":
			d.recirculations += v
		case "emc hits":
			d.emcHits += v
		case "smc hits":
			d.smcHits += v
		case "megaflow hits":
			d.megaflowHits += v
		case "miss with success upcall", "miss with failed upcall":
			d.upcalls += v
		}
	}
	return d
}

// dpCounter measures one stretch of traffic on both nodes' datapaths.
type dpCounter struct {
	s        *framework.Sandbox
	nodes    []string
	cpuStart []time.Duration
}

// startDP zeroes the datapath counters of both nodes and notes their ovs-vswitchd's CPU
// time.
func startDP(s *framework.Sandbox, nodes []string) (*dpCounter, error) {
	c := &dpCounter{s: s, nodes: nodes}
	for _, n := range nodes {
		if _, err := appctl(s, n, "dpif-netdev/pmd-stats-clear"); err != nil {
			return nil, err
		}
		cpu, err := vswitchdCPU(s, n)
		if err != nil {
			return nil, err
		}
		c.cpuStart = append(c.cpuStart, cpu)
	}
	return c, nil
}

// read sums the datapath counters of both nodes since startDP.
func (c *dpCounter) read() (dpStats, error) {
	var sum dpStats
	for i, n := range c.nodes {
		out, err := appctl(c.s, n, "dpif-netdev/pmd-stats-show")
		if err != nil {
			return dpStats{}, err
		}
		d := parsePMDStats(out)
		if d.packets == 0 {
			return dpStats{}, fmt.Errorf("%s: no packets read from pmd-stats-show after traffic:\n%s", n, out)
		}
		cpu, err := vswitchdCPU(c.s, n)
		if err != nil {
			return dpStats{}, err
		}
		d.cpu = cpu - c.cpuStart[i]
		sum = sum.add(d)
	}
	return sum, nil
}

// vswitchdPID is the pid of the node's ovs-vswitchd, from its pid file in the sandbox.
func vswitchdPID(s *framework.Sandbox, node string) (pidFile, pid string, err error) {
	pidFile = filepath.Join(s.Layout.PidDir(), node+"-ovs-vswitchd.pid")
	b, err := os.ReadFile(pidFile)
	if err != nil {
		return "", "", fmt.Errorf("ovs-vswitchd of %s: %w", node, err)
	}
	return pidFile, strings.TrimSpace(string(b)), nil
}

// perfEnv names a directory: when set, each bulk transfer is profiled with perf record
// on both nodes' ovs-vswitchd, into <dir>/<path>-<n>.data (investigation only).
const perfEnv = "KOVS_BENCH_DATAPATH_PERF"

// startPerf starts perf record on both nodes' ovs-vswitchd into dir/name.data; stop ends
// it and waits for the file. Without perfEnv it does nothing.
func startPerf(s *framework.Sandbox, nodes []string, name string) (stop func() error, err error) {
	dir := os.Getenv(perfEnv)
	if dir == "" {
		return func() error { return nil }, nil
	}
	var pids []string
	for _, n := range nodes {
		_, pid, err := vswitchdPID(s, n)
		if err != nil {
			return nil, err
		}
		pids = append(pids, pid)
	}
	cmd := exec.Command("perf", "record", "-q", "-F", "1999", "-p", strings.Join(pids, ","), "-o", filepath.Join(dir, name+".data"))
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("%s set: perf record: %w", perfEnv, err)
	}
	out := filepath.Join(dir, name+".data")
	return func() error {
		_ = cmd.Process.Signal(os.Interrupt)
		err := cmd.Wait()
		// perf record ends on SIGINT (exit status 130, or the signal itself), its file
		// written.
		var exit *exec.ExitError
		if errors.As(err, &exit) && (exit.ExitCode() == 130 || exit.String() == "signal: interrupt") {
			err = nil
		}
		if err == nil {
			_, err = os.Stat(out)
		}
		if err != nil {
			return fmt.Errorf("perf record into %s: %w", out, err)
		}
		return nil
	}, nil
}

// clockTick is the unit of /proc/<pid>/stat's CPU times (USER_HZ, 100 on Linux).
const clockTick = 10 * time.Millisecond

// vswitchdCPU is the CPU time (user and system, all threads) the node's ovs-vswitchd has
// used, from its pid file in the sandbox.
func vswitchdCPU(s *framework.Sandbox, node string) (time.Duration, error) {
	pidFile, pid, err := vswitchdPID(s, node)
	if err != nil {
		return 0, err
	}
	stat, err := os.ReadFile("/proc/" + pid + "/stat")
	if err != nil {
		return 0, fmt.Errorf("ovs-vswitchd of %s: %w", node, err)
	}
	// pid (comm) state ppid ...: utime and stime are the 14th and 15th fields, the 12th
	// and 13th after the command's closing parenthesis.
	text := string(stat)
	if !strings.HasPrefix(text, pid+" (ovs-vswitchd) ") {
		return 0, fmt.Errorf("%s names pid %s, which is not ovs-vswitchd: %.40q", pidFile, pid, text)
	}
	f := strings.Fields(text[strings.LastIndexByte(text, ')')+1:])
	if len(f) < 13 {
		return 0, fmt.Errorf("/proc/%s/stat: %d fields after the command", pid, len(f))
	}
	utime, err1 := strconv.ParseInt(f[11], 10, 64)
	stime, err2 := strconv.ParseInt(f[12], 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		return 0, fmt.Errorf("/proc/%s/stat: %w", pid, err)
	}
	return time.Duration(utime+stime) * clockTick, nil
}

// dpFlow is one datapath flow of dpctl/dump-flows.
type dpFlow struct {
	packets int64
	text    string
}

var dpFlowPackets = regexp.MustCompile(`packets:([0-9]+)`)

// hotDPFlows returns how many datapath flows the node has and those of them that carried
// at least minPackets packets, busiest first.
func hotDPFlows(s *framework.Sandbox, node string, minPackets int64) (int, []dpFlow, error) {
	out, err := appctl(s, node, "dpctl/dump-flows")
	if err != nil {
		return 0, nil, err
	}
	total := 0
	var hot []dpFlow
	for _, line := range strings.Split(out, "\n") {
		m := dpFlowPackets.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		total++
		n, _ := strconv.ParseInt(m[1], 10, 64)
		if n >= minPackets {
			hot = append(hot, dpFlow{packets: n, text: strings.TrimSpace(line)})
		}
	}
	slices.SortFunc(hot, func(a, b dpFlow) int { return int(b.packets - a.packets) })
	return total, hot, nil
}
