package conformance_test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"syscall"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/kovs-net/kovs/test/e2e/framework"
)

// The network-policy-api conformance suite (sigs.k8s.io/network-policy-api v0.3.0,
// profile ClusterNetworkPolicy, standard and experimental features) runs from its own Go
// module, netpolapi/, so that its controller-runtime stays out of kovs's go.mod. Its
// suite/ package is the module's TestConformanceProfiles with the base manifests that
// netpolapi/genbase writes at build time (the module's, without the SCTP servers).
const (
	netpolAPIModule  = "netpolapi"
	netpolAPIProfile = "ClusterNetworkPolicy"
)

// netpolAPISuite is the suite as this report names it.
func netpolAPISuite() suite {
	return suite{
		Name: "network-policy-api (ClusterNetworkPolicy)",
		About: "`sigs.k8s.io/network-policy-api` v0.3.0's `conformance` package, run as its own CI runs it " +
			"(`TestConformanceProfiles --conformance-profiles=" + netpolAPIProfile + " --all-features`: the standard and " +
			"the experimental features, with the experimental CRD of dist/policy-api applied), from the module " +
			"test/e2e/conformance/netpolapi. Its base manifests are the module's without the 10 `agnhost porter` " +
			"containers that serve SCTP, generated from the module's file when the suite is built (netpolapi/genbase, " +
			"never kept in the repository): porter exits when it cannot listen on SCTP, so with them every test would " +
			"fail at setup on this kernel. A test whose every failed assertion is an SCTP probe is not runnable",
	}
}

// runNetpolAPISuite builds and runs the network-policy-api suite against the sandbox and
// reads its go test -json stream. Nothing is retried: a flake is a failure.
func runNetpolAPISuite(sb *framework.Sandbox, dir string, timeout time.Duration) (run, error) {
	s := netpolAPISuite()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return run{}, err
	}
	root, err := filepath.Abs(filepath.Join("..", "..", ".."))
	if err != nil {
		return run{}, err
	}
	// The experimental channel is a superset of dist's standard CRD (docs/cluster-network-policy.md).
	if out, err := sb.Kubectl("apply", "--server-side", "-f", filepath.Join(root, "dist", "policy-api", "experimental.yaml")); err != nil {
		return run{}, fmt.Errorf("applying the experimental ClusterNetworkPolicy CRD: %v\n%s", err, out)
	}
	mod := filepath.Join(root, "test", "e2e", "conformance", netpolAPIModule)
	gen := exec.Command("go", "generate", "./suite/")
	gen.Dir = mod
	if out, err := gen.CombinedOutput(); err != nil {
		return run{}, fmt.Errorf("generating the suite's manifests (go generate in %s): %v\n%s", mod, err, out)
	}
	jsonPath, logPath := filepath.Join(dir, "suite.json"), filepath.Join(dir, "suite.log")
	jsonf, err := os.Create(jsonPath)
	if err != nil {
		return run{}, err
	}
	defer jsonf.Close()
	logf, err := os.Create(logPath)
	if err != nil {
		return run{}, err
	}
	defer logf.Close()
	cmd := exec.Command("go", "test", "-json", "-count=1", "-timeout", timeout.String(),
		"-run", "^TestConformanceProfiles$", "./suite/", "-args",
		"--conformance-profiles="+netpolAPIProfile, "--all-features",
		"--organization=kovs-net", "--project=kovs", "--url=https://github.com/kovs-net/kovs",
		"--version="+kovsCommit(), "--contact=https://github.com/kovs-net/kovs/issues",
		"--additional-info=make conformance (docs/conformance.md)",
		"--report-output="+filepath.Join(dir, "report.yaml"))
	cmd.Dir = mod
	cmd.Env = append(os.Environ(), "KUBECONFIG="+sb.Layout.Kubeconfig())
	cmd.Stdout, cmd.Stderr = jsonf, logf
	start := time.Now()
	runErr := cmd.Run()
	r := run{Suite: s, Wall: time.Since(start), Log: jsonPath}
	events, err := os.Open(jsonPath)
	if err != nil {
		return r, err
	}
	defer events.Close()
	results, err := readTestJSON(events, "TestConformanceProfiles", sctpProbeReason())
	if err != nil {
		return r, fmt.Errorf("%s: go test (%v): %w (output %s, log %s)", s.Name, runErr, err, jsonPath, logPath)
	}
	r.Results = results
	notes, err := profileNotes(filepath.Join(dir, "report.yaml"), results)
	if err != nil {
		return r, fmt.Errorf("%s: the suite's conformance report: %w", s.Name, err)
	}
	r.Notes = notes
	return r, nil
}

// profileReport is what kovs reads of the suite's own conformance report
// (conformance/apis/v1alpha1 ConformanceReport).
type profileReport struct {
	Profiles []struct {
		Name                   string
		Standard, Experimental struct {
			Result      string
			Statistics  struct{ Passed, Failed, Skipped int }
			FailedTests []string `json:"failedTests"`
		}
	}
}

// profileNotes says what the suite's own report concluded for each profile and feature
// set, and whether every test it counts as failed is one of the not-runnable ones.
func profileNotes(path string, results []result) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	var rep profileReport
	if err := yaml.Unmarshal(b, &rep); err != nil {
		return "", err
	}
	status := map[string]string{}
	for _, r := range results {
		status[r.Name] = r.Status
	}
	var parts []string
	for _, p := range rep.Profiles {
		for _, set := range []struct {
			name string
			s    struct {
				Result      string
				Statistics  struct{ Passed, Failed, Skipped int }
				FailedTests []string `json:"failedTests"`
			}
		}{{"standard", p.Standard}, {"experimental", p.Experimental}} {
			others := 0
			for _, f := range set.s.FailedTests {
				if status[f] != "not runnable" {
					others++
				}
			}
			why := "every test it counts as failed is named below as not runnable"
			if others > 0 {
				why = fmt.Sprintf("%d of the tests it counts as failed are not SCTP's", others)
			}
			parts = append(parts, fmt.Sprintf("profile %s, %s features: %s, %d passed, %d failed, %d skipped (%s)",
				p.Name, set.name, set.s.Result, set.s.Statistics.Passed, set.s.Statistics.Failed, set.s.Statistics.Skipped, why))
		}
	}
	if len(parts) == 0 {
		return "", fmt.Errorf("%s names no profile", path)
	}
	return "The suite's own conformance report (`--report-output`): " + strings.Join(parts, "; ") + ".", nil
}

// testEvent is one line of go test -json (cmd/test2json).
type testEvent struct {
	Action  string
	Test    string
	Elapsed float64
	Output  string
}

// A poke (conformance/utils/kubernetes.PokeServer) logs the command of each failed try,
// and testify logs each failed assertion; the command before an assertion is its probe.
var (
	failedProbe     = regexp.MustCompile(`FAILED Command was \[.*--protocol=(\w+)`)
	failedAssertion = regexp.MustCompile(`^\s+Error:\s`)
)

// readTestJSON reads the results of parent's subtests (the suite's tests: one level
// below it) from a go test -json stream. A failed test whose every failed assertion is a
// probe over SCTP is "not runnable" when sctpReason says why (this kernel has no SCTP
// sockets); a failure of parent itself outside its subtests (the suite's setup) is an
// error.
func readTestJSON(r io.Reader, parent, sctpReason string) ([]result, error) {
	type state struct {
		res             result
		output          []string
		done            bool
		subPass, subAll int // its subtests: passed, and all that ended
	}
	tests := map[string]*state{}
	var parentOut []string
	parentFailed := false
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		var e testEvent
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			continue // go test's own lines (build errors) are in the log
		}
		if e.Test == parent {
			parentOut = append(parentOut, e.Output)
			if e.Action == "fail" {
				parentFailed = true
			}
			continue
		}
		rest, ok := strings.CutPrefix(e.Test, parent+"/")
		if !ok {
			continue
		}
		name, _, _ := strings.Cut(rest, "/")
		st := tests[name]
		if st == nil {
			st = &state{res: result{Name: name}}
			tests[name] = st
		}
		st.output = append(st.output, e.Output)
		if e.Test != parent+"/"+name {
			// A subtest's events: its output counts for the test.
			if strings.Count(e.Test, "/") == 2 && (e.Action == "pass" || e.Action == "fail") {
				st.subAll++
				if e.Action == "pass" {
					st.subPass++
				}
			}
			continue
		}
		switch e.Action {
		case "pass", "fail", "skip":
			st.done = true
			st.res.Status = map[string]string{"pass": "passed", "fail": "failed", "skip": "skipped by the suite"}[e.Action]
			st.res.Duration = time.Duration(e.Elapsed * float64(time.Second))
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if len(tests) == 0 {
		if parentFailed {
			return nil, fmt.Errorf("the suite failed before its tests: %s", lastLines(parentOut, 15))
		}
		return nil, fmt.Errorf("no test of %s ran", parent)
	}
	var out []result
	for _, st := range tests {
		res := st.res
		switch {
		case !st.done:
			res.Status, res.Message = "not run", "the run ended before it finished"
		case res.Status == "skipped by the suite":
			res.Message = oneLine(strings.Join(st.output, " "))
		case res.Status == "failed":
			protos := failedProtocols(st.output)
			if sctpReason != "" && len(protos) > 0 && onlySCTP(protos) {
				res.Status = "not runnable"
				res.Message = fmt.Sprintf("every failed assertion (%d) is a probe over SCTP, and %d of its %d subtests passed "+
					"(in the others, what comes after the first SCTP probe did not run); %s", len(protos), st.subPass, st.subAll, sctpReason)
			} else {
				res.Message = fmt.Sprintf("failed probes over %s: %s", strings.Join(protos, ", "), failureLines(st.output))
			}
		}
		out = append(out, res)
	}
	if parentFailed && len(out) > 0 {
		// The suite's own report step, after its tests.
		failedOutside := true
		for _, res := range out {
			if res.Status == "failed" || res.Status == "not runnable" {
				failedOutside = false
			}
		}
		if failedOutside {
			return nil, fmt.Errorf("%s failed outside its tests: %s", parent, lastLines(parentOut, 15))
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// failedProtocols is the protocol of the probe before each failed assertion in a test's
// output ("none" when no probe came before it: a failure that is not a probe's).
func failedProtocols(output []string) []string {
	var protos []string
	last := "none"
	for _, chunk := range output {
		for _, line := range strings.Split(chunk, "\n") {
			if m := failedProbe.FindStringSubmatch(line); m != nil {
				last = strings.ToLower(m[1])
			} else if failedAssertion.MatchString(line) {
				protos = append(protos, last)
			}
		}
	}
	return protos
}

func onlySCTP(protos []string) bool {
	for _, p := range protos {
		if p != "sctp" {
			return false
		}
	}
	return true
}

// failureLines is the testify failure lines of a test's output, on one line.
func failureLines(output []string) string {
	var keep []string
	for _, chunk := range output {
		for _, line := range strings.Split(chunk, "\n") {
			if failedAssertion.MatchString(line) || failedProbe.MatchString(line) || strings.Contains(line, "Expected connection") {
				keep = append(keep, strings.TrimSpace(line))
			}
		}
	}
	if len(keep) == 0 {
		return lastLines(output, 10)
	}
	return oneLine(strings.Join(keep, " "))
}

func lastLines(output []string, n int) string {
	lines := strings.Split(strings.Join(output, ""), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return oneLine(strings.Join(lines, " "))
}

// sctpProbeReason says why an SCTP probe cannot succeed here, with the evidence, or is
// empty when this kernel has SCTP sockets (then SCTP failures are failures).
func sctpProbeReason() string {
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM, syscall.IPPROTO_SCTP)
	if err == nil {
		syscall.Close(fd)
		return ""
	}
	return fmt.Sprintf("this kernel has no SCTP sockets: socket(AF_INET, SOCK_STREAM, IPPROTO_SCTP) fails with %q, so no pod can serve or open SCTP (the suite's SCTP servers are left out of its base manifests)", err.Error())
}
