package realnode_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/kovs-net/kovs/test/e2e/framework"
)

// controlPlane are the sandbox processes that are no node's: their memory is left out.
var controlPlane = map[string]bool{"etcd": true, "kube-apiserver": true, "kube-controller-manager": true,
	"kube-scheduler": true, "relays": true, "kovs-controller": true}

// BenchmarkNodeMemory brings up one node with kovs, emulated and real, and reports the
// resident memory of what runs for that node once kovs is installed and ready: for the
// emulator its emulator, kovs-agent and OVS; for a real node kubelet, containerd, its
// shims, the pods' containers (kovs-agent, pause) and OVS. The control plane and
// kovs-controller (a process of the root namespace with the emulator, pods on the node
// with real nodes) are left out of both. Run with -benchtime 1x (make bench does).
func BenchmarkNodeMemory(b *testing.B) {
	env := framework.Require(b)
	var emulated float64
	for _, rt := range []string{"emulator", "containerd"} {
		b.Run("runtime="+rt, func(b *testing.B) {
			var rss float64
			for i := 0; i < b.N; i++ {
				s := framework.New(b, env, framework.UniqueName())
				if out, err := s.Run("up", "--nodes", "1", "--runtime", rt); err != nil {
					_, _ = s.Run("down")
					b.Fatalf("up: %v\n%s", err, out)
				}
				time.Sleep(10 * time.Second) // past start-up peaks
				rss += nodeRSS(s)
				if out, err := s.Run("down"); err != nil {
					b.Fatalf("down: %v\n%s", err, out)
				}
			}
			rss /= float64(b.N)
			b.ReportMetric(rss, "MiB-rss-node")
			if rt == "emulator" {
				emulated = rss
			} else if emulated > 0 {
				b.ReportMetric(rss/emulated, "x-emulated")
			}
		})
	}
}

// nodeRSS sums the resident memory of the node's processes: the sandbox's own (by its
// marker) and the containers of its real nodes (by their cgroups), without the control
// plane and kovs-controller.
func nodeRSS(s *framework.Sandbox) float64 {
	seen := map[int]bool{}
	var kb float64
	add := func(pid int) {
		if seen[pid] || controlPlane[processName(pid)] {
			return
		}
		seen[pid] = true
		kb += vmRSSKiB(pid)
	}
	for _, pid := range s.Layout.OwnedPIDs() {
		add(pid)
	}
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if cg, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid)); strings.Contains(string(cg), "/"+s.Layout.NetNSPrefix()) {
			add(pid)
		}
	}
	return kb / 1024
}

func processName(pid int) string {
	exe, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid))
	if err != nil {
		return ""
	}
	return filepath.Base(strings.TrimSuffix(exe, " (deleted)"))
}

func vmRSSKiB(pid int) float64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "VmRSS:" {
			v, _ := strconv.ParseFloat(f[1], 64)
			return v
		}
	}
	return 0
}

// BenchmarkInstall times `kubectl apply -k` of dist/ to every node Ready on three real
// nodes, as `up` reports it, and the whole `up`.
func BenchmarkInstall(b *testing.B) {
	env := framework.Require(b)
	var apply, up float64
	for i := 0; i < b.N; i++ {
		s := framework.New(b, env, framework.UniqueName())
		start := time.Now()
		out, err := s.Run("up", "--nodes", "3", "--runtime", "containerd")
		up += time.Since(start).Seconds()
		if err != nil {
			_, _ = s.Run("down")
			b.Fatalf("up: %v\n%s", err, out)
		}
		var secs float64
		for _, line := range strings.Split(out, "\n") {
			if _, err := fmt.Sscanf(line, "kovs installed: every node Ready %fs after kubectl apply -k", &secs); err == nil {
				break
			}
		}
		apply += secs
		if out, err := s.Run("down"); err != nil {
			b.Fatalf("down: %v\n%s", err, out)
		}
	}
	b.ReportMetric(apply/float64(b.N), "s-apply-to-ready")
	b.ReportMetric(up/float64(b.N), "s-up")
}
