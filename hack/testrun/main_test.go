package main

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestReportFailsOnSkipsNotAllowed(t *testing.T) {
	dir := t.TempDir()
	list := filepath.Join(dir, "allowed")
	if err := os.WriteFile(list, []byte("# comment\nexample.com/p  TestRoot(/.*)?  needs the module absent\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	allow, err := readAllowList(list)
	if err != nil {
		t.Fatal(err)
	}
	acc := &accounting{output: map[string][]string{}}
	for _, e := range []event{
		{Action: "run", Package: "example.com/p", Test: "TestRoot"},
		{Action: "output", Package: "example.com/p", Test: "TestRoot", Output: "=== RUN   TestRoot\n"},
		{Action: "output", Package: "example.com/p", Test: "TestRoot", Output: "    x_test.go:3: the module is loaded\n"},
		{Action: "skip", Package: "example.com/p", Test: "TestRoot"},
		{Action: "output", Package: "example.com/p", Test: "TestOther", Output: "    y_test.go:9: not root\n"},
		{Action: "skip", Package: "example.com/p", Test: "TestOther"},
		{Action: "pass", Package: "example.com/p", Test: "TestFine"},
		{Action: "skip", Package: "example.com/q"}, // a package without tests
	} {
		acc.add(e, io.Discard)
	}
	r := acc.report(allow)
	if r.unexpected != 1 {
		t.Errorf("unexpected skips = %d, want 1:\n%s", r.unexpected, r.text)
	}
	for _, want := range []string{"1 passed, 0 failed, 2 skipped", "skip (allowed: needs the module absent) example.com/p TestRoot: x_test.go:3: the module is loaded",
		"UNEXPECTED SKIP example.com/p TestOther: y_test.go:9: not root"} {
		if !strings.Contains(r.text, want) {
			t.Errorf("report lacks %q:\n%s", want, r.text)
		}
	}
}

func TestAllowListNeedsAReason(t *testing.T) {
	list := filepath.Join(t.TempDir(), "allowed")
	if err := os.WriteFile(list, []byte("example.com/p TestRoot\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := readAllowList(list); err == nil || !strings.Contains(err.Error(), "REASON") {
		t.Errorf("an entry without a reason: err = %v", err)
	}
}

func TestReportListsTheSlowestFirst(t *testing.T) {
	acc := &accounting{output: map[string][]string{}}
	for _, e := range []event{
		{Action: "pass", Package: "example.com/p", Test: "TestQuick", Elapsed: 1},
		{Action: "pass", Package: "example.com/p", Test: "TestSlow/sub", Elapsed: 300},
		{Action: "fail", Package: "example.com/p", Test: "TestSlow", Elapsed: 301},
		{Action: "pass", Package: "example.com/p", Elapsed: 302.5},
	} {
		acc.add(e, io.Discard)
	}
	text := acc.report(nil).text
	want := "   302.5s example.com/p\n   301.0s example.com/p TestSlow\n     1.0s example.com/p TestQuick\n"
	if !strings.Contains(text, want) {
		t.Errorf("report lacks the durations, slowest first, without subtests:\n%s", text)
	}
}

func TestReportEndsWithTheFailuresAndWhatTheySaid(t *testing.T) {
	acc := &accounting{output: map[string][]string{}}
	for _, e := range []event{
		{Action: "output", Package: "example.com/p", Test: "TestParent", Output: "=== RUN   TestParent\n"},
		{Action: "output", Package: "example.com/p", Test: "TestParent/child", Output: "=== RUN   TestParent/child\n"},
		{Action: "output", Package: "example.com/p", Test: "TestParent/child", Output: "    x_test.go:7: 1 of 40 reached the old endpoint\n"},
		{Action: "output", Package: "example.com/p", Test: "TestParent/child", Output: "--- FAIL: TestParent/child (1.00s)\n"},
		{Action: "fail", Package: "example.com/p", Test: "TestParent/child"},
		{Action: "fail", Package: "example.com/p", Test: "TestParent"},
		{Action: "pass", Package: "example.com/p", Test: "TestFine", Elapsed: 900},
		{Action: "output", Package: "example.com/p", Output: "FAIL\n"},
		{Action: "fail", Package: "example.com/p"},
		{Action: "output", Package: "example.com/q", Output: "panic: test timed out after 40m0s\n"},
		{Action: "fail", Package: "example.com/q"},
	} {
		acc.add(e, io.Discard)
	}
	text := acc.report(nil).text
	want := "FAILED: 2\n--- FAIL example.com/p TestParent/child\n      x_test.go:7: 1 of 40 reached the old endpoint\n" +
		"--- FAIL example.com/q \n      panic: test timed out after 40m0s\n"
	if !strings.HasSuffix(text, want) {
		t.Errorf("report does not end with the failures, each cause once:\n%s", text)
	}
}

func TestFailureNamesTheTestsOwnMessagesBeforeALogDump(t *testing.T) {
	acc := &accounting{output: map[string][]string{}}
	for _, l := range []string{"=== RUN   BenchmarkX/bg=1000\n", "    x_test.go:90: timed out: 999 of 1000 policies realized\n",
		"    framework.go:142: --- etcd.log (last lines) ---\n"} {
		acc.add(event{Action: "output", Package: "example.com/p", Test: "BenchmarkX/bg=1000", Output: l}, io.Discard)
	}
	for i := range 10 {
		acc.add(event{Action: "output", Package: "example.com/p", Test: "BenchmarkX/bg=1000", Output: fmt.Sprintf("        log line %d\n", i)}, io.Discard)
	}
	acc.add(event{Action: "fail", Package: "example.com/p", Test: "BenchmarkX/bg=1000"}, io.Discard)
	text := acc.report(nil).text
	if !strings.HasSuffix(text, "--- FAIL example.com/p BenchmarkX/bg=1000\n      x_test.go:90: timed out: 999 of 1000 policies realized\n") {
		t.Errorf("the failure does not end with the test's own message:\n%s", text)
	}
}
