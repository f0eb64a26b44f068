package conformance_test

import (
	"encoding/xml"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"time"

	"github.com/kovs-net/kovs/test/e2e/framework"
)

// e2eTest is the upstream suite binary, built by hack/build-k8s.sh next to kubectl.
const e2eTest = "e2e.test"

// suite is a selection of the upstream end-to-end tests.
type suite struct {
	Name string
	// Focus and Skip are ginkgo regular expressions over the tests' full names.
	Focus, Skip string
	// About says what the suite is in the report when it is not e2e.test's (no Focus).
	About string
	// NotRunnable matches the tests of Focus that cannot run on these machines, with the
	// reason (they are passed to the suite's skip).
	NotRunnable []notRunnable
}

type notRunnable struct {
	Match  *regexp.Regexp
	Reason string
}

// result is one upstream test as the suite's JUnit report has it.
type result struct {
	Name     string
	Status   string // passed, failed, not runnable, skipped by the suite, not run
	Duration time.Duration
	Message  string
}

// run is what one suite run gave.
type run struct {
	Suite   suite
	Results []result
	// Notes is what the report says of the run besides its results (or nothing).
	Notes string
	Wall  time.Duration
	Log   string
}

// skipExpr is the suite's skip plus its not-runnable tests.
func (s suite) skipExpr() string {
	var parts []string
	if s.Skip != "" {
		parts = append(parts, s.Skip)
	}
	for _, n := range s.NotRunnable {
		parts = append(parts, n.Match.String())
	}
	return strings.Join(parts, "|")
}

// runSuite runs e2e.test with the suite's selection against the sandbox and reads its
// JUnit report. Nothing is retried: a flake is a failure.
func runSuite(sb *framework.Sandbox, s suite, dir string, timeout time.Duration) (run, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return run{}, err
	}
	junit := filepath.Join(dir, "junit.xml")
	bin := sb.K8sBinDir()
	args := []string{
		"--kubeconfig", sb.Layout.Kubeconfig(), "--provider", "skeleton",
		"--kubectl-path", filepath.Join(bin, "kubectl"),
		"--ginkgo.focus", s.Focus, "--ginkgo.no-color",
		"--ginkgo.timeout", timeout.String(),
		"--ginkgo.junit-report", junit, "--report-dir", dir,
	}
	if skip := s.skipExpr(); skip != "" {
		args = append(args, "--ginkgo.skip", skip)
	}
	cmd := exec.Command(filepath.Join(bin, e2eTest), args...)
	cmd.Env = append(os.Environ(), "PATH="+bin+":"+os.Getenv("PATH"))
	cmd.Dir = dir
	logPath := filepath.Join(dir, "e2e.log")
	logf, err := os.Create(logPath)
	if err != nil {
		return run{}, err
	}
	defer logf.Close()
	cmd.Stdout, cmd.Stderr = logf, logf
	start := time.Now()
	runErr := cmd.Run()
	r := run{Suite: s, Wall: time.Since(start), Log: logPath}
	results, err := readJUnit(junit, s)
	if err != nil {
		return r, fmt.Errorf("%s: e2e.test (%v) left no readable report (log %s): %w", s.Name, runErr, logPath, err)
	}
	r.Results = results
	return r, nil
}

// The JUnit report ginkgo writes.
type junitReport struct {
	Suites []struct {
		Cases []struct {
			Name    string  `xml:"name,attr"`
			Status  string  `xml:"status,attr"`
			Time    float64 `xml:"time,attr"`
			Skipped *struct {
				Message string `xml:"message,attr"`
			} `xml:"skipped"`
			Failure *struct {
				Message string `xml:"message,attr"`
			} `xml:"failure"`
			Error *struct {
				Message string `xml:"message,attr"`
			} `xml:"error"`
		} `xml:"testcase"`
	} `xml:"testsuite"`
}

// readJUnit keeps the suite's tests ("[It]" cases its focus selects): those that ran,
// those the suite skipped itself while running (a message says why), and the
// not-runnable ones with their reason.
func readJUnit(path string, s suite) ([]result, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var rep junitReport
	if err := xml.Unmarshal(b, &rep); err != nil {
		return nil, err
	}
	focus, err := regexp.Compile(s.Focus)
	if err != nil {
		return nil, err
	}
	// Tests the suite's own Skip leaves out are not part of it; ginkgo reports them
	// skipped ("skipped") when they match the focus.
	skip := regexp.MustCompile(`$^`)
	if s.Skip != "" {
		if skip, err = regexp.Compile(s.Skip); err != nil {
			return nil, err
		}
	}
	var out []result
	for _, ts := range rep.Suites {
		for _, c := range ts.Cases {
			name, ok := strings.CutPrefix(c.Name, "[It] ")
			if !ok || !focus.MatchString(name) || skip.MatchString(name) {
				continue
			}
			res := result{Name: trimLabels(name), Status: c.Status, Duration: time.Duration(c.Time * float64(time.Second))}
			switch {
			case c.Status == "passed":
			case c.Status == "skipped":
				reason, ok := s.notRunnableReason(name)
				if !ok {
					if c.Skipped == nil || c.Skipped.Message == "" {
						continue // not selected (the suite's own skip)
					}
					if c.Skipped.Message == "skipped" {
						// No reason: the run was interrupted (or timed out) before it.
						res.Status, res.Message = "not run", "the run ended before it"
						break
					}
					res.Status, res.Message = "skipped by the suite", oneLine(c.Skipped.Message)
					break
				}
				res.Status, res.Message = "not runnable", reason
			default:
				res.Status = "failed"
				if c.Failure != nil {
					res.Message = oneLine(c.Failure.Message)
				} else if c.Error != nil {
					res.Message = oneLine(c.Error.Message)
				}
			}
			out = append(out, res)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

func (s suite) notRunnableReason(name string) (string, bool) {
	for _, n := range s.NotRunnable {
		if n.Match.MatchString(name) {
			return n.Reason, true
		}
	}
	return "", false
}

// trimLabels drops ginkgo's label list ("[sig-network, Feature:NetworkPolicy]") that the
// JUnit name ends with: the test's own name already carries its tags.
func trimLabels(name string) string {
	if i := strings.LastIndex(name, " ["); i > 0 && strings.HasSuffix(name, "]") && strings.Contains(name[i:], ", ") {
		return name[:i]
	}
	return name
}

func oneLine(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > 300 {
		s = s[:300] + "..."
	}
	return s
}

// counts tallies a run's results by status.
func (r run) counts() map[string]int {
	c := map[string]int{}
	for _, res := range r.Results {
		c[res.Status]++
	}
	return c
}

// failures lists what did not pass and is not a known not-runnable test.
func (r run) failures() []result {
	var out []result
	for _, res := range r.Results {
		if res.Status == "failed" || res.Status == "skipped by the suite" || res.Status == "not run" {
			out = append(out, res)
		}
	}
	return out
}
