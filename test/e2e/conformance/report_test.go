package conformance_test

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"time"
)

// writeReport writes docs/conformance.md: for each suite its counts and wall time, and
// every test with its result.
func writeReport(path string, runs []run) error {
	var b strings.Builder
	b.WriteString(`# Upstream conformance: the Kubernetes suites on kovs

Written by ` + "`make conformance`" + ` (test/e2e/conformance, TestConformance): the upstream
` + "`e2e.test`" + ` v1.37.2, built by hack/build-k8s.sh, against a sandbox of three real nodes
(kubelet v1.37.2, containerd 1.6, runc; kovs installed from dist/ with kubectl apply -k;
CoreDNS as the cluster DNS), on the OVS userspace datapath. Every test runs once: nothing
is retried. A test that cannot run here for a reason outside kovs is "not runnable", with
the reason and its evidence. The third suite is the rest of sig-network an operator
would run to check a kube-proxy replacement (issue 34): focus ` + "`[sig-network]`" + `, without
Serial, Disruptive, Slow, Flaky, Feature-tagged, LoadBalancer, Conformance and Netpol
tests. ` + "`make test`" + ` runs a subset of the NetworkPolicy suite (TestUpstreamNetpolSubset)
and one test of each Services behaviour the third suite found missing
(TestUpstreamSigNetworkSubset).

`)
	fmt.Fprintf(&b, "Last run: kovs %s, finished %s UTC.\n\n", kovsCommit(), time.Now().UTC().Format("2006-01-02 15:04"))
	b.WriteString("| suite | passed | failed | not runnable | skipped by the suite | not run | wall time |\n|---|---|---|---|---|---|---|\n")
	for _, r := range runs {
		c := r.counts()
		fmt.Fprintf(&b, "| %s | %d | %d | %d | %d | %d | %s |\n", r.Suite.Name, c["passed"], c["failed"], c["not runnable"],
			c["skipped by the suite"], c["not run"], r.Wall.Round(time.Second))
	}
	for _, r := range runs {
		fmt.Fprintf(&b, "\n## %s\n\nFocus `%s`.\n\n| test | result | time | why |\n|---|---|---|---|\n", r.Suite.Name, r.Suite.Focus)
		for _, res := range r.Results {
			fmt.Fprintf(&b, "| %s | %s | %s | %s |\n", escape(res.Name), res.Status, res.Duration.Round(100*time.Millisecond),
				escape(res.Message))
		}
	}
	return os.WriteFile(path, []byte(b.String()), 0o644)
}

// kovsCommit is the checkout's commit, marked when it has uncommitted changes.
func kovsCommit() string {
	out, err := exec.Command("git", "rev-parse", "--short=12", "HEAD").Output()
	if err != nil {
		return "(not a git checkout)"
	}
	commit := strings.TrimSpace(string(out))
	if st, err := exec.Command("git", "status", "--porcelain", "--untracked-files=no").Output(); err == nil && len(st) > 0 {
		commit += " (with uncommitted changes)"
	}
	return commit
}

func escape(s string) string { return strings.ReplaceAll(s, "|", `\|`) }
