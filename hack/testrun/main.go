// Command testrun runs `go test -json` with the given arguments, prints what `go test -v`
// would (every test's output, as it comes), and then accounts for the run: it fails when
// go test fails, and when a test or benchmark was skipped without being on the allow-list,
// so a test that quietly stops running (not root, a missing tool, a wrong build) fails
// `make test` instead of passing unseen.
//
//	go run ./hack/testrun [-allow hack/allowed-skips.txt] [-go go] [-summary FILE] -- -count=1 ./go-controller/...
//
// The allow-list has one skip per line: the package, a regular expression that the whole
// test name must match, and the reason the skip is fine where it happens, separated by
// whitespace (the reason runs to the end of the line); '#' starts a comment.
package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"regexp"
	"sort"
	"strings"
	"time"
)

// event is one line of `go test -json` (cmd/test2json).
type event struct {
	Time    time.Time
	Action  string
	Package string
	Test    string
	Elapsed float64
	Output  string
}

// allowed is one line of the allow-list.
type allowed struct {
	pkg    string
	test   *regexp.Regexp
	reason string
}

func main() {
	allowFile := flag.String("allow", "hack/allowed-skips.txt", "the skips that may happen, with their reasons")
	summary := flag.String("summary", "", "also write the accounting (skips, counts, failures) to this file")
	goCmd := flag.String("go", "go", "the go command")
	flag.Parse()
	allow, err := readAllowList(*allowFile)
	if err != nil {
		fmt.Fprintln(os.Stderr, "testrun:", err)
		os.Exit(2)
	}
	acc, testErr := run(*goCmd, flag.Args(), os.Stdout)
	report := acc.report(allow)
	fmt.Print(report.text)
	if *summary != "" {
		if err := os.WriteFile(*summary, []byte(report.text), 0o644); err != nil {
			fmt.Fprintln(os.Stderr, "testrun:", err)
		}
	}
	switch {
	case testErr != nil:
		fmt.Fprintln(os.Stderr, "testrun: go test failed:", testErr)
		os.Exit(1)
	case report.unexpected > 0:
		fmt.Fprintf(os.Stderr, "testrun: %d skip(s) not on %s: fix what made them skip, or list them with a reason\n",
			report.unexpected, *allowFile)
		os.Exit(1)
	}
}

func readAllowList(path string) ([]allowed, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("allow-list: %w", err)
	}
	var out []allowed
	for i, line := range strings.Split(string(b), "\n") {
		if j := strings.Index(line, "#"); j >= 0 {
			line = line[:j]
		}
		fields := strings.Fields(line)
		if len(fields) == 0 {
			continue
		}
		if len(fields) < 3 {
			return nil, fmt.Errorf("%s:%d: want PACKAGE TEST-REGEXP REASON, got %q", path, i+1, strings.TrimSpace(line))
		}
		re, err := regexp.Compile("^(?:" + fields[1] + ")$")
		if err != nil {
			return nil, fmt.Errorf("%s:%d: %w", path, i+1, err)
		}
		out = append(out, allowed{pkg: fields[0], test: re, reason: strings.Join(fields[2:], " ")})
	}
	return out, nil
}

// accounting is what a run did, test by test.
type accounting struct {
	passed, failed int
	skipped        []skip
	// output holds each running test's output until it ends (for a skip's reason).
	output map[string][]string
	// took is how long each package and each top-level test ran, for the time budget
	// of make test (the slowest are printed with the accounting).
	took []timing
	// failures are the tests and packages that failed, with what they said, printed
	// last: CI shows only the end of a run's output, and a failure must be named there.
	failures []failure
}

// failure is a failed test (or a package that failed outside any test: a build
// error, a panic, a timeout) and its last lines of output.
type failure struct {
	pkg, test string
	said      []string
}

type timing struct {
	name    string
	seconds float64
}

type skip struct {
	pkg, test, reason string
}

// run runs go test -json with args, echoing the tests' output to w.
func run(goCmd string, args []string, w io.Writer) (*accounting, error) {
	cmd := exec.Command(goCmd, append([]string{"test", "-json"}, args...)...)
	cmd.Stderr = os.Stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	acc := &accounting{output: map[string][]string{}}
	sc := bufio.NewScanner(stdout)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		var e event
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			fmt.Fprintln(w, sc.Text()) // not an event: build output
			continue
		}
		acc.add(e, w)
	}
	err = errors.Join(sc.Err(), cmd.Wait())
	return acc, err
}

func (a *accounting) add(e event, w io.Writer) {
	id := e.Package + " " + e.Test
	switch e.Action {
	case "output":
		fmt.Fprint(w, e.Output)
		a.output[id] = append(a.output[id], e.Output)
		if e.Test == "" && len(a.output[id]) > 2*failureLines {
			// a package's own output is kept only for its failure (a panic, a
			// timeout): its end is enough
			a.output[id] = a.output[id][len(a.output[id])-failureLines:]
		}
	case "pass":
		if e.Test != "" {
			a.passed++
		}
		a.time(e)
		delete(a.output, id)
	case "fail":
		if e.Test != "" {
			a.failed++
		}
		a.failures = append(a.failures, failure{pkg: e.Package, test: e.Test, said: said(a.output[id])})
		a.time(e)
		delete(a.output, id)
	case "skip":
		if e.Test != "" {
			a.skipped = append(a.skipped, skip{pkg: e.Package, test: e.Test, reason: skipReason(a.output[id])})
		}
		delete(a.output, id)
	}
}

// time records the duration of a package or a top-level test (subtests are part of
// their parent's).
func (a *accounting) time(e event) {
	if strings.Contains(e.Test, "/") {
		return
	}
	name := e.Package
	if e.Test != "" {
		name += " " + e.Test
	}
	a.took = append(a.took, timing{name: name, seconds: e.Elapsed})
}

// slowest is how many durations the accounting prints.
const slowest = 15

// skipReason is the message a test logged before it skipped: its output without the
// "=== RUN" and "--- SKIP" lines.
func skipReason(lines []string) string {
	return strings.Join(messages(lines), " | ")
}

// messages is what a test wrote itself: its output without blank lines and go test's
// own "=== RUN", "--- PASS/FAIL/SKIP", "PASS", "FAIL" and "ok" lines, each trimmed.
func messages(lines []string) []string {
	var out []string
	for _, l := range lines {
		t := strings.TrimSpace(l)
		if t == "" || strings.HasPrefix(t, "=== ") || strings.HasPrefix(t, "--- ") || t == "FAIL" || t == "PASS" ||
			strings.HasPrefix(t, "FAIL\t") || strings.HasPrefix(t, "ok  \t") {
			continue
		}
		out = append(out, t)
	}
	return out
}

// failureLines is how many lines of a failure's own output the accounting repeats, and
// failuresListed how many failures it names.
const (
	failureLines   = 6
	failuresListed = 12
)

// said is the end of a test's messages, each cut to one screen line.
func said(lines []string) []string {
	out := messages(lines)
	for i, t := range out {
		if len(t) > 240 {
			out[i] = t[:240] + " …"
		}
	}
	// A test's own messages ("x_test.go:12: ...") say why it failed; what it logged
	// after them (a sandbox's log dump) does not.
	var own []string
	for _, l := range out {
		if testMessage.MatchString(l) {
			own = append(own, l)
		}
	}
	if len(own) > 0 {
		out = own
	}
	if len(out) > failureLines {
		out = out[len(out)-failureLines:]
	}
	return out
}

// testMessage is the start of a line that t.Error, t.Fatal or t.Log wrote.
var testMessage = regexp.MustCompile(`^[\w.-]+_test\.go:\d+: `)

// leafFailures drops a failed test whose subtest failed too (the parent's failure is
// the child's), and a failed package that has a failed test, so each cause is named once.
func leafFailures(fs []failure) []failure {
	var out []failure
	for _, f := range fs {
		covered := false
		for _, g := range fs {
			if g.pkg != f.pkg || g.test == f.test {
				continue
			}
			if f.test == "" || strings.HasPrefix(g.test, f.test+"/") {
				covered = true
				break
			}
		}
		if !covered {
			out = append(out, f)
		}
	}
	return out
}

type report struct {
	text       string
	unexpected int
}

func (a *accounting) report(allow []allowed) report {
	var b strings.Builder
	var r report
	sort.Slice(a.skipped, func(i, j int) bool {
		return a.skipped[i].pkg+" "+a.skipped[i].test < a.skipped[j].pkg+" "+a.skipped[j].test
	})
	fmt.Fprintf(&b, "\n=== accounting: %d passed, %d failed, %d skipped\n", a.passed, a.failed, len(a.skipped))
	for _, s := range a.skipped {
		why, ok := allowedBy(allow, s)
		if ok {
			fmt.Fprintf(&b, "skip (allowed: %s) %s %s: %s\n", why, s.pkg, s.test, s.reason)
			continue
		}
		r.unexpected++
		fmt.Fprintf(&b, "UNEXPECTED SKIP %s %s: %s\n", s.pkg, s.test, s.reason)
	}
	sort.SliceStable(a.took, func(i, j int) bool { return a.took[i].seconds > a.took[j].seconds })
	if len(a.took) > 0 {
		fmt.Fprintf(&b, "slowest packages and tests:\n")
	}
	for i, t := range a.took {
		if i == slowest {
			break
		}
		fmt.Fprintf(&b, "%8.1fs %s\n", t.seconds, t.name)
	}
	if fs := leafFailures(a.failures); len(fs) > 0 {
		fmt.Fprintf(&b, "FAILED: %d\n", len(fs))
		for i, f := range fs {
			if i == failuresListed {
				fmt.Fprintf(&b, "  and %d more (search the output above for \"--- FAIL\")\n", len(fs)-i)
				break
			}
			fmt.Fprintf(&b, "--- FAIL %s %s\n", f.pkg, f.test)
			for _, l := range f.said {
				fmt.Fprintf(&b, "      %s\n", l)
			}
		}
	}
	r.text = b.String()
	return r
}

func allowedBy(allow []allowed, s skip) (string, bool) {
	for _, a := range allow {
		if a.pkg == s.pkg && a.test.MatchString(s.test) {
			return a.reason, true
		}
	}
	return "", false
}
