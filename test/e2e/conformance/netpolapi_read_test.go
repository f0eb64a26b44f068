package conformance_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestReadTestJSON reads a go test -json stream shaped like the network-policy-api
// suite's: a test passing, one skipped, one failing only at SCTP probes (after a TCP
// probe that failed once and then passed), one failing at a TCP probe after an SCTP one,
// one failing without a probe, and one the run ended in.
func TestReadTestJSON(t *testing.T) {
	const p = "TestConformanceProfiles"
	var lines []string
	ev := func(action, test, output string, elapsed float64) {
		b, _ := json.Marshal(testEvent{Action: action, Test: test, Output: output, Elapsed: elapsed})
		lines = append(lines, string(b))
	}
	probe := func(test, proto string) {
		ev("output", test, "    helper.go:100: FAILED Command was [/agnhost connect --timeout=3s --protocol="+proto+" 10.0.0.1:80]\n", 0)
	}
	assertion := func(test string) {
		ev("output", test, "        \tError Trace:\thelper.go:70\n        \tError:      \tCondition never satisfied\n", 0)
	}
	ev("run", p, "", 0)
	ev("output", p, "Test Setup: Applying base manifests\n", 0)
	ev("run", p+"/Passing", "", 0)
	ev("pass", p+"/Passing", "", 2.5)
	ev("run", p+"/Skipped", "", 0)
	ev("output", p+"/Skipped", "    suite.go:1: Skipping Skipped: suite does not support X\n", 0)
	ev("skip", p+"/Skipped", "", 0)
	ev("run", p+"/SCTPOnly", "", 0)
	ev("run", p+"/SCTPOnly/egress", "", 0)
	probe(p+"/SCTPOnly/egress", "tcp") // retried by Eventually, then passed
	probe(p+"/SCTPOnly/egress", "sctp")
	assertion(p + "/SCTPOnly/egress")
	ev("fail", p+"/SCTPOnly/egress", "", 11)
	ev("fail", p+"/SCTPOnly", "", 11)
	ev("run", p+"/TCPToo", "", 0)
	probe(p+"/TCPToo", "sctp")
	assertion(p + "/TCPToo")
	probe(p+"/TCPToo", "tcp")
	assertion(p + "/TCPToo")
	ev("fail", p+"/TCPToo", "", 20)
	ev("run", p+"/NoProbe", "", 0)
	ev("output", p+"/NoProbe", "    helper.go:150: \n        \tError:      \tReceived unexpected error: pods not found\n", 0)
	ev("fail", p+"/NoProbe", "", 1)
	ev("run", p+"/Interrupted", "", 0)
	lines = append(lines, "FAIL\tgithub.com/x/suite\t30.0s")

	const reason = "no SCTP here"
	got, err := readTestJSON(strings.NewReader(strings.Join(lines, "\n")), p, reason)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		"Passing": "passed", "Skipped": "skipped by the suite", "SCTPOnly": "not runnable",
		"TCPToo": "failed", "NoProbe": "failed", "Interrupted": "not run",
	}
	if len(got) != len(want) {
		t.Fatalf("got %d results, want %d: %+v", len(got), len(want), got)
	}
	for _, r := range got {
		if r.Status != want[r.Name] {
			t.Errorf("%s: %q (%s), want %q", r.Name, r.Status, r.Message, want[r.Name])
		}
		switch r.Name {
		case "Passing":
			if r.Duration != 2500*time.Millisecond {
				t.Errorf("Passing took %s, want 2.5s", r.Duration)
			}
		case "SCTPOnly":
			if !strings.Contains(r.Message, reason) || !strings.Contains(r.Message, "(1)") || !strings.Contains(r.Message, "0 of its 1 subtests passed") {
				t.Errorf("SCTPOnly's reason: %q", r.Message)
			}
		case "TCPToo":
			if !strings.Contains(r.Message, "sctp, tcp") {
				t.Errorf("TCPToo's message: %q", r.Message)
			}
		case "NoProbe":
			if !strings.Contains(r.Message, "none") || !strings.Contains(r.Message, "pods not found") {
				t.Errorf("NoProbe's message: %q", r.Message)
			}
		}
	}
	// Where SCTP works, an SCTP failure is a failure.
	got, err = readTestJSON(strings.NewReader(strings.Join(lines, "\n")), p, "")
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range got {
		if r.Name == "SCTPOnly" && r.Status != "failed" {
			t.Errorf("SCTPOnly with SCTP sockets: %q, want failed", r.Status)
		}
	}
	// A suite whose setup failed has no results, and says why.
	setup := `{"Action":"output","Test":"` + p + `","Output":"NamespacesMustBeReady: timed out\n"}
{"Action":"fail","Test":"` + p + `"}`
	if _, err := readTestJSON(strings.NewReader(setup), p, reason); err == nil || !strings.Contains(err.Error(), "timed out") {
		t.Errorf("a failed setup: err %v", err)
	}
}

// TestReportKeepsOtherSuites writes a report for one suite over one holding two: the
// other suite's row and section stay as they were, the one that ran is replaced.
func TestReportKeepsOtherSuites(t *testing.T) {
	path := filepath.Join(t.TempDir(), "conformance.md")
	first := []run{
		{Suite: netpolSuite(nil), Results: []result{{Name: "np test", Status: "passed"}}, Wall: time.Minute},
		{Suite: netpolAPISuite(), Results: []result{{Name: "CNPOld", Status: "failed", Message: "old"}}, Wall: time.Minute},
	}
	if err := writeReport(path, first); err != nil {
		t.Fatal(err)
	}
	again := []run{{Suite: netpolAPISuite(), Results: []result{{Name: "CNPNew", Status: "passed"}}, Wall: 2 * time.Minute}}
	if err := writeReport(path, again); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	for _, want := range []string{"| NetworkPolicy (Netpol) | 1 | 0 |", "| np test | passed |", "| network-policy-api (ClusterNetworkPolicy) | 1 | 0 | 0 | 0 | 0 | 2m0s |", "| CNPNew | passed |"} {
		if !strings.Contains(s, want) {
			t.Errorf("the report lacks %q:\n%s", want, s)
		}
	}
	if strings.Contains(s, "CNPOld") {
		t.Errorf("the suite that ran again kept its old result:\n%s", s)
	}
	if strings.Index(s, "## NetworkPolicy (Netpol)") > strings.Index(s, "## network-policy-api") {
		t.Errorf("the suites are out of order:\n%s", s)
	}
}

// TestProfileNotes reads the suite's own report: a profile whose failed tests are all
// not runnable says so; one with another failure counts it.
func TestProfileNotes(t *testing.T) {
	path := filepath.Join(t.TempDir(), "report.yaml")
	rep := `apiVersion: policy.networking.k8s.io/v1alpha1
kind: ConformanceReport
profiles:
- name: ClusterNetworkPolicy
  experimental:
    failedTests: [CNPNodePeers]
    result: failure
    statistics: {Failed: 1, Passed: 4, Skipped: 0}
  standard:
    failedTests: [CNPSCTP, CNPTCP]
    result: failure
    statistics: {Failed: 2, Passed: 14, Skipped: 0}
`
	if err := os.WriteFile(path, []byte(rep), 0o644); err != nil {
		t.Fatal(err)
	}
	got, err := profileNotes(path, []result{{Name: "CNPNodePeers", Status: "not runnable"}, {Name: "CNPSCTP", Status: "not runnable"}, {Name: "CNPTCP", Status: "failed"}})
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"profile ClusterNetworkPolicy, standard features: failure, 14 passed, 2 failed, 0 skipped (1 of the tests it counts as failed are not SCTP's)",
		"profile ClusterNetworkPolicy, experimental features: failure, 4 passed, 1 failed, 0 skipped (every test it counts as failed is named below as not runnable)",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("the notes lack %q:\n%s", want, got)
		}
	}
}
