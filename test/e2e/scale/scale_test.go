// End-to-end runs of the scale harness (test/e2e/scale/harness) against a sandbox in scale
// mode: the real kube-apiserver, etcd and kovs-controller, with simulated nodes and agents.
// TestScaleCorrectness (make e2e, 200 nodes) asserts only that every agent ends with
// exactly its node's from-scratch share; TestScaleBenchmark (make scale) is the benchmark
// and writes docs/scale.md; BenchmarkPodAllocation (make bench) measures pod address
// allocation alone. Needs root.
package scale_test

import (
	"bytes"
	"context"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/kovs-net/kovs/go-controller/pkg/sandbox"
	"github.com/kovs-net/kovs/test/e2e/framework"
	"github.com/kovs-net/kovs/test/e2e/scale/harness"
)

// upScale starts a scale-mode sandbox: no node namespaces, kovs-controller with room for
// 16,384 node blocks, and an audit log of its requests; replicas kovs-controllers (two
// for a failover, as dist runs), with flags added to the sandbox's.
func upScale(t testing.TB, replicas int, flags []string) *framework.Sandbox {
	env := framework.Require(t)
	args := []string{"--control-plane-only", "--nodes", "0", "--cluster-cidrs", sandbox.ScaleClusterCIDR, "--audit-kovs",
		"--controller-replicas", strconv.Itoa(replicas)}
	for _, f := range flags {
		args = append(args, "--controller-flag", f)
	}
	return framework.Up(t, env, args...)
}

// run runs the harness and logs its report; onReport sees the result even when the run
// failed (the measurements up to the failure).
func run(t *testing.T, cfg harness.Config, onReport func(*harness.Result)) *harness.Result {
	t.Helper()
	replicas := 1
	if cfg.Failover {
		replicas = 2
	}
	s := upScale(t, replicas, cfg.ControllerFlags)
	h, err := harness.New(cfg, s.Layout, t.Logf)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	start := time.Now()
	res, err := h.Run(ctx)
	t.Logf("harness ran %s", time.Since(start).Round(time.Second))
	var report bytes.Buffer
	if res != nil {
		res.Markdown(&report, "kovs at scale")
		t.Logf("\n%s", report.String())
		if onReport != nil {
			onReport(res)
		}
	}
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// TestScaleCorrectness runs the whole harness at 200 nodes (KOVS_SCALE_* variables
// resize it) and checks only correctness: after the churn, every simulated agent's share,
// built from the real stream's snapshot and deltas, equals the controller's from-scratch
// compile for its node.
func TestScaleCorrectness(t *testing.T) {
	cfg, err := harness.TestSize().FromEnv()
	if err != nil {
		t.Fatal(err)
	}
	res := run(t, cfg, nil)
	if res.Verified != cfg.Nodes {
		t.Fatalf("%d of %d agents verified", res.Verified, cfg.Nodes)
	}
	// The changes that reach every node reached every node.
	if fo := res.FanOut; cfg.FanOutProbes > 0 && (fo.Nodes != cfg.Nodes || fo.PolicyLost > 0 || fo.Lost > 0 ||
		len(fo.Policy) != 2*cfg.FanOutProbes || len(fo.Added) != cfg.FanOutProbes || len(fo.Removed) != cfg.FanOutProbes) {
		t.Errorf("fan-out: %d of %d nodes held the peers' policy; %d policy changes realized everywhere, %d lost; %d address additions and %d removals applied everywhere, %d lost; want %d nodes, %d, %d and %d, none lost",
			fo.Nodes, cfg.Nodes, len(fo.Policy), fo.PolicyLost, len(fo.Added), len(fo.Removed), fo.Lost, cfg.Nodes, 2*cfg.FanOutProbes, cfg.FanOutProbes, cfg.FanOutProbes)
	}
}

// TestScaleBenchmark is `make scale`: the full size unless KOVS_SCALE_* say otherwise;
// KOVS_SCALE_REPORT names the Markdown file the report is written to.
func TestScaleBenchmark(t *testing.T) {
	if os.Getenv("KOVS_SCALE") != "1" {
		t.Skip("the scale benchmark: make scale sets KOVS_SCALE=1")
	}
	cfg, err := harness.FullSize().FromEnv()
	if err != nil {
		t.Fatal(err)
	}
	run(t, cfg, func(res *harness.Result) {
		path := os.Getenv("KOVS_SCALE_REPORT")
		if path == "" {
			return
		}
		if res.Failure != "" {
			// The last complete run's report stays; the partial one goes beside it.
			path = failedReportPath(path)
			t.Logf("the run did not complete: its partial report is in %s", path)
		}
		if err := writeReport(path, res); err != nil {
			t.Error(err)
		}
	})
}

// failedReportPath is where the partial report of a failed run goes: beside path, which
// keeps the last complete run's.
func failedReportPath(path string) string {
	return strings.TrimSuffix(path, ".md") + "-failed-run.md"
}

// notesMarker starts the hand-written part of docs/scale.md (what limited the run, the
// other plugins' figures), which a new report keeps.
const notesMarker = "<!-- notes: everything below is kept by make scale -->"

func writeReport(path string, res *harness.Result) error {
	var b bytes.Buffer
	res.Markdown(&b, "kovs at scale: the last make scale run")
	old, err := os.ReadFile(path)
	if err != nil && !os.IsNotExist(err) {
		return err
	}
	notes := notesMarker + "\n"
	if i := bytes.Index(old, []byte(notesMarker)); i >= 0 {
		notes = string(old[i:])
	}
	b.WriteString("\n" + notes)
	return os.WriteFile(path, b.Bytes(), 0o644)
}
