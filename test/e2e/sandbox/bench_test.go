package sandbox_test

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/kovs-net/kovs/test/e2e/framework"
)

// BenchmarkSandboxUp times `kovs-sandbox up` (control plane, nodes with their OVS, node
// emulators registered) for 1, 3 and 10 nodes, and reports the resident memory of all the
// sandbox's processes right after up. Run with -benchtime 1x (make bench does).
func BenchmarkSandboxUp(b *testing.B) {
	env := framework.Require(b)
	for _, nodes := range []int{1, 3, 10} {
		b.Run(fmt.Sprintf("nodes=%d", nodes), func(b *testing.B) {
			var rss float64
			b.StopTimer()
			for i := 0; i < b.N; i++ {
				s := framework.New(b, env, framework.UniqueName())
				b.StartTimer()
				out, err := s.Run("up", "--nodes", strconv.Itoa(nodes), "--network", "none")
				b.StopTimer()
				if err != nil {
					_, _ = s.Run("down")
					b.Fatalf("up: %v\n%s", err, out)
				}
				rss += residentMiB(s.Layout.OwnedPIDs())
				if out, err := s.Run("down"); err != nil {
					b.Fatalf("down: %v\n%s", err, out)
				}
			}
			b.ReportMetric(rss/float64(b.N), "MiB-rss")
		})
	}
}

// residentMiB sums VmRSS of the given processes.
func residentMiB(pids []int) float64 {
	var kb float64
	for _, pid := range pids {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n") {
			if f := strings.Fields(line); len(f) >= 2 && f[0] == "VmRSS:" {
				v, _ := strconv.ParseFloat(f[1], 64)
				kb += v
			}
		}
	}
	return kb / 1024
}
