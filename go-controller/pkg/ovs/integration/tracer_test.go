package integration

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kovs-net/kovs/go-controller/pkg/ovs"
	"github.com/kovs-net/kovs/go-controller/pkg/ovs/ovstest"
)

// maxShown bounds the disagreements shown with their traces.
const maxShown = 5

// tracedPacket is one line of the trace corpus (pkg/pipeline, trace_corpus_test.go).
type tracedPacket struct {
	Flows   string   `json:"flows"`
	Packet  string   `json:"packet"`
	CTNext  string   `json:"ctNext"`
	Dropped bool     `json:"dropped"`
	Table   uint8    `json:"table"`
	Outputs []uint32 `json:"outputs"`
	What    string   `json:"what"`
}

// TestTracerAgreesWithOVS checks kovs's Go packet tracer, which the pipeline's behaviour
// tests judge flows with, against ovs-vswitchd itself. It runs the pipeline's randomized
// test (TestPolicyTracerAgreesWithReference: the golden NetworkPolicy scenario of
// ovs-flows/golden with its own share and 200 random ones, 60 random first packets each)
// with KOVS_TRACE_CORPUS set, so that it records every packet it traces with the flows
// and the Go tracer's verdict; then it loads each flow set into a real ovs-vswitchd and
// runs every packet through ofproto/trace. The verdicts must be the same: dropped or not,
// the last table visited, and the ports the packet left through.
func TestTracerAgreesWithOVS(t *testing.T) {
	ovstest.RequireOVS(t)
	dir := t.TempDir()
	runPipelineCorpus(t, dir)
	packets := readCorpus(t, dir)
	checkGolden(t, filepath.Join(dir, packets[0].Flows), goldenPolicyFlows)
	rig, _, _ := bridgeWithFlows(t)
	addPorts(t, rig, packets)
	// One connection for every trace, where ovs-appctl would start a process for each.
	ctl, err := ovs.DialUnixctl(context.Background(), rig.VswitchdCtl, rig.Dir)
	if err != nil {
		t.Fatal(err)
	}
	defer ctl.Close()
	var disagree []string
	bad := 0
	loaded := ""
	start := time.Now()
	for _, p := range packets {
		if p.Flows != loaded {
			rig.Ofctl(t, "del-flows", "br-int")
			rig.Ofctl(t, "add-flows", "br-int", "--bundle", filepath.Join(dir, p.Flows))
			loaded = p.Flows
		}
		args := []string{"br-int", p.Packet}
		for range 4 { // every conntrack lookup of the trace returns this state
			args = append(args, "--ct-next", p.CTNext)
		}
		text, err := ctl.Call(context.Background(), "ofproto/trace", args...)
		if err != nil {
			t.Fatalf("%s: ofproto/trace %s: %v", p.What, p.Packet, err)
		}
		d := compareVerdicts(p, ovs.ParseTrace(text, "br-int"))
		if d == "" {
			continue
		}
		bad++
		if len(disagree) < maxShown {
			disagree = append(disagree, fmt.Sprintf("%s (%s, flows %s): %s\n%s", p.What, p.Packet, p.Flows, d, text))
		}
	}
	t.Logf("%d packets through %d flow sets traced by ovs-vswitchd in %s", len(packets), countFlowSets(packets),
		time.Since(start).Round(time.Millisecond))
	if bad > 0 {
		t.Errorf("the Go tracer and ofproto/trace disagree on %d of %d packets (the first %d, with OVS's trace):\n%s",
			bad, len(packets), len(disagree), strings.Join(disagree, "\n"))
	}
}

// compareVerdicts describes how ovs-vswitchd's trace differs from the Go tracer's verdict
// (empty when it does not).
func compareVerdicts(p tracedPacket, got ovs.Trace) string {
	last, ok := got.LastStep()
	if !ok {
		return "ofproto/trace matched no flow"
	}
	var outs []uint32
	for _, o := range got.OutputPorts {
		outs = append(outs, uint32(o))
	}
	if got.Dropped() != p.Dropped || last.Table != p.Table || !slices.Equal(outs, p.Outputs) {
		return fmt.Sprintf("Go tracer: dropped=%v last table %d outputs %v; ovs-vswitchd: dropped=%v last table %d outputs %v",
			p.Dropped, p.Table, p.Outputs, got.Dropped(), last.Table, outs)
	}
	return ""
}

// goldenPolicyFlows is the golden file of the scenario the randomized test starts from
// (its seed -1, the scenario's own share).
var goldenPolicyFlows = filepath.Join("..", "..", "..", "..", "ovs-flows", "golden", "three-nodes-dual-stack-node-1-policy.flows")

// checkGolden checks that a recorded flow set holds the flows of a golden file: the
// comparison covers the reference scenario as ovs-flows/ documents it.
func checkGolden(t *testing.T, recorded, golden string) {
	t.Helper()
	lines := func(path string) []string {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, l := range strings.Split(string(b), "\n") {
			if l = strings.TrimSpace(l); l != "" && !strings.HasPrefix(l, "#") {
				out = append(out, l)
			}
		}
		slices.Sort(out)
		return out
	}
	if got, want := lines(recorded), lines(golden); !slices.Equal(got, want) {
		t.Fatalf("the first recorded flow set (%d flows) is not the golden scenario %s (%d flows)", len(got), golden, len(want))
	}
}

// runPipelineCorpus runs the pipeline's randomized test with the corpus going to dir.
func runPipelineCorpus(t *testing.T, dir string) {
	t.Helper()
	goCmd, err := exec.LookPath("go")
	if err != nil {
		goCmd = filepath.Join(runtime.GOROOT(), "bin", "go")
	}
	cmd := exec.Command(goCmd, "test", "-count=1", "-run", "^TestPolicyTracerAgreesWithReference$", "../../pipeline")
	cmd.Env = append(os.Environ(), "KOVS_TRACE_CORPUS="+dir)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("record the pipeline's traces (%s): %v\n%s", cmd, err, out)
	}
}

func readCorpus(t *testing.T, dir string) []tracedPacket {
	t.Helper()
	f, err := os.Open(filepath.Join(dir, "packets.jsonl"))
	if err != nil {
		t.Fatalf("the pipeline test recorded no traces: %v", err)
	}
	defer f.Close()
	var out []tracedPacket
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var p tracedPacket
		if err := json.Unmarshal(sc.Bytes(), &p); err != nil {
			t.Fatalf("corpus line %q: %v", sc.Text(), err)
		}
		out = append(out, p)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if len(out) == 0 {
		t.Fatal("the pipeline test recorded no traces")
	}
	return out
}

func countFlowSets(packets []tracedPacket) int {
	sets := map[string]bool{}
	for _, p := range packets {
		sets[p.Flows] = true
	}
	return len(sets)
}

// addPorts gives br-int an internal port at every OpenFlow port number the packets come
// in on or go out of, so the traces see real ports.
func addPorts(t *testing.T, rig *ovstest.Rig, packets []tracedPacket) {
	t.Helper()
	ports := map[uint32]bool{}
	for _, p := range packets {
		var in uint32
		if _, err := fmt.Sscanf(p.Packet, "in_port=%d,", &in); err != nil {
			t.Fatalf("packet %q: %v", p.Packet, err)
		}
		ports[in] = true
		for _, o := range p.Outputs {
			ports[o] = true
		}
	}
	for _, n := range slices.Sorted(func(yield func(uint32) bool) {
		for n := range ports {
			if !yield(n) {
				return
			}
		}
	}) {
		name := fmt.Sprintf("p%d", n)
		rig.Vsctl(t, "add-port", "br-int", name, "--", "set", "Interface", name, "type=internal", fmt.Sprintf("ofport_request=%d", n))
	}
}
