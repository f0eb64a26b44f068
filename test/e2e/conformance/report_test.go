package conformance_test

import (
	"fmt"
	"os"
	"os/exec"
	"slices"
	"sort"
	"strings"
	"time"
)

// writeReport writes docs/conformance.md: for each suite its counts and wall time, and
// every test with its result. A suite that did not run this time (KOVS_CONFORMANCE_ONLY)
// keeps its row and its section from the report already at path.
func writeReport(path string, runs []run) error {
	var b strings.Builder
	b.WriteString(`# Upstream conformance: the Kubernetes suites on kovs

Written by ` + "`make conformance`" + ` (test/e2e/conformance, TestConformance): the upstream
` + "`e2e.test`" + ` v1.37.2, built by hack/build-k8s.sh, and the network-policy-api conformance
suite, against a sandbox of three real nodes (kubelet v1.37.2, containerd 1.6, runc; kovs
installed from dist/ with kubectl apply -k; CoreDNS as the cluster DNS), on the OVS
userspace datapath. Every test runs once: nothing is retried. A test that cannot run here
for a reason outside kovs is "not runnable", with the reason and its evidence. The third
suite is the rest of sig-network an operator would run to check a kube-proxy replacement
(issue 34): focus ` + "`[sig-network]`" + `, without Serial, Disruptive, Slow, Flaky,
Feature-tagged, LoadBalancer, Conformance and Netpol tests. The fourth is the
ClusterNetworkPolicy suite of sigs.k8s.io/network-policy-api (issue 28). ` + "`make test`" + ` runs
a subset of the NetworkPolicy suite (TestUpstreamNetpolSubset) and one test of each
Services behaviour the third suite found missing (TestUpstreamSigNetworkSubset).
` + "`KOVS_CONFORMANCE_ONLY=<part of a suite's name>`" + ` runs one suite and rewrites only its
row and section; each section says when it last ran.

`)
	oldRows, oldSections := readReport(path)
	ran := map[string]run{}
	var order []string
	for _, name := range append(reportSuiteOrder(), keysOf(oldRows)...) {
		if !slices.Contains(order, name) {
			order = append(order, name)
		}
	}
	for _, r := range runs {
		ran[r.Suite.Name] = r
		if !slices.Contains(order, r.Suite.Name) {
			order = append(order, r.Suite.Name)
		}
	}
	finished := fmt.Sprintf("Last run: kovs %s, finished %s UTC.", kovsCommit(), time.Now().UTC().Format("2006-01-02 15:04"))
	b.WriteString("| suite | passed | failed | not runnable | skipped by the suite | not run | wall time |\n|---|---|---|---|---|---|---|\n")
	for _, name := range order {
		if r, ok := ran[name]; ok {
			c := r.counts()
			fmt.Fprintf(&b, "| %s | %d | %d | %d | %d | %d | %s |\n", name, c["passed"], c["failed"], c["not runnable"],
				c["skipped by the suite"], c["not run"], r.Wall.Round(time.Second))
		} else if row, ok := oldRows[name]; ok {
			b.WriteString(row + "\n")
		}
	}
	for _, name := range order {
		r, ok := ran[name]
		if !ok {
			if sec, ok := oldSections[name]; ok {
				b.WriteString("\n" + sec)
			}
			continue
		}
		about := fmt.Sprintf("Focus `%s`.", r.Suite.Focus)
		if r.Suite.About != "" {
			about = r.Suite.About + "."
		}
		if r.Notes != "" {
			about += "\n\n" + r.Notes
		}
		fmt.Fprintf(&b, "\n## %s\n\n%s\n\n%s\n\n| test | result | time | why |\n|---|---|---|---|\n", name, finished, about)
		for _, res := range r.Results {
			fmt.Fprintf(&b, "| %s | %s | %s | %s |\n", escape(res.Name), res.Status, res.Duration.Round(100*time.Millisecond),
				escape(res.Message))
		}
	}
	return os.WriteFile(path, []byte(b.String()), 0o644)
}

// reportSuiteOrder is the order of the suites in the report.
func reportSuiteOrder() []string {
	return []string{netpolSuite(nil).Name, sigNetworkConformance().Name, sigNetworkSelection(nil).Name, netpolAPISuite().Name}
}

// readReport reads a report writeReport wrote: the summary table's row of each suite and
// each suite's section (from its "## " line to the next one), by suite name. A missing
// file has none.
func readReport(path string) (rows, sections map[string]string) {
	rows, sections = map[string]string{}, map[string]string{}
	data, err := os.ReadFile(path)
	if err != nil {
		return rows, sections
	}
	var cur string
	var sec strings.Builder
	flush := func() {
		if cur != "" {
			sections[cur] = strings.TrimRight(sec.String(), "\n") + "\n"
		}
		sec.Reset()
	}
	for _, line := range strings.Split(string(data), "\n") {
		if name, ok := strings.CutPrefix(line, "## "); ok {
			flush()
			cur = name
		}
		if cur != "" {
			sec.WriteString(line + "\n")
			continue
		}
		if strings.HasPrefix(line, "| ") && !strings.HasPrefix(line, "| suite |") {
			name := strings.TrimSpace(strings.SplitN(strings.TrimPrefix(line, "|"), "|", 2)[0])
			rows[name] = line
		}
	}
	flush()
	return rows, sections
}

func keysOf(m map[string]string) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
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
