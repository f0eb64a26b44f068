package harness

import (
	"fmt"
	"os"
	"runtime"
	"sync"
	"time"

	"github.com/prometheus/procfs"

	"github.com/kovs-net/kovs/go-controller/pkg/sandbox"
)

// measuredProcesses are the sandbox processes whose CPU and memory a run reports, and the
// harness itself (the simulated nodes and agents).
var measuredProcesses = []string{"kovs-controller", "kovs-controller-2", "kube-apiserver", "etcd", "kube-controller-manager", "kube-scheduler"}

const harnessProcess = "harness (simulated nodes and agents)"

// ProcessUsage is a process's CPU time and memory.
type ProcessUsage struct {
	Name       string
	CPUSeconds float64
	// PeakRSS is VmHWM (the peak resident set), RSS the current VmRSS, in bytes.
	PeakRSS, RSS int64
}

// PhaseUsage is one phase's wall time and each process's CPU in it.
type PhaseUsage struct {
	Name       string
	Start, End time.Time
	CPUSeconds map[string]float64
}

// procSampler reads /proc for the sandbox's processes and the harness.
type procSampler struct {
	pids map[string]int
	// frozen are the last readings of processes stopped on purpose (a killed leader):
	// what they used until then.
	mu     sync.Mutex
	frozen map[string]ProcessUsage
}

func newProcSampler(l sandbox.Layout) *procSampler {
	s := &procSampler{pids: map[string]int{harnessProcess: os.Getpid()}, frozen: map[string]ProcessUsage{}}
	for _, name := range measuredProcesses {
		if pid := l.PID(name); pid != 0 {
			s.pids[name] = pid
		}
	}
	return s
}

type procMark struct {
	name  string
	start time.Time
	cpu   map[string]float64
}

func (s *procSampler) mark(phase string) procMark {
	m := procMark{name: phase, start: time.Now(), cpu: map[string]float64{}}
	for name := range s.pids {
		m.cpu[name] = s.cpu(name)
	}
	return m
}

func (s *procSampler) since(m procMark) PhaseUsage {
	u := PhaseUsage{Name: m.name, Start: m.start, End: time.Now(), CPUSeconds: map[string]float64{}}
	for name := range s.pids {
		u.CPUSeconds[name] = s.cpu(name) - m.cpu[name]
	}
	return u
}

// cpu is the named process's CPU seconds: its frozen reading once it was stopped.
func (s *procSampler) cpu(name string) float64 {
	if f, ok := s.frozenUsage(name); ok {
		return f.CPUSeconds
	}
	c, _ := cpuSeconds(s.pids[name])
	return c
}

// freeze keeps the named process's readings as they are now, before it is stopped.
func (s *procSampler) freeze(name string) {
	pid, ok := s.pids[name]
	if !ok {
		return
	}
	u := readUsage(name, pid)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.frozen[name] = u
}

func (s *procSampler) frozenUsage(name string) (ProcessUsage, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	f, ok := s.frozen[name]
	return f, ok
}

// readUsage is the process's CPU since it started and its memory now.
func readUsage(name string, pid int) ProcessUsage {
	u := ProcessUsage{Name: name}
	u.CPUSeconds, _ = cpuSeconds(pid)
	u.PeakRSS, u.RSS, _ = memory(pid)
	return u
}

// totals are every process's CPU since it started and its memory now.
func (s *procSampler) totals() []ProcessUsage {
	var out []ProcessUsage
	for _, name := range append(append([]string(nil), measuredProcesses...), harnessProcess) {
		pid, ok := s.pids[name]
		if !ok {
			continue
		}
		if f, stopped := s.frozenUsage(name); stopped {
			out = append(out, f)
		} else {
			out = append(out, readUsage(name, pid))
		}
	}
	return out
}

// cpuSeconds is utime+stime of /proc/<pid>/stat.
func cpuSeconds(pid int) (float64, error) {
	p, err := procfs.NewProc(pid)
	if err != nil {
		return 0, err
	}
	st, err := p.Stat()
	if err != nil {
		return 0, err
	}
	return st.CPUTime(), nil
}

// memory is VmHWM and VmRSS of /proc/<pid>/status, in bytes.
func memory(pid int) (peak, rss int64, err error) {
	p, err := procfs.NewProc(pid)
	if err != nil {
		return 0, 0, err
	}
	st, err := p.NewStatus()
	if err != nil {
		return 0, 0, err
	}
	return int64(st.VmHWM), int64(st.VmRSS), nil
}

// cpuCount says how many CPUs the machine has.
func cpuCount() string {
	return fmt.Sprintf("%d CPUs", runtime.NumCPU())
}
