// Package strip makes the network-policy-api conformance suite's base manifests runnable
// on a kernel without SCTP sockets. Every pod of the suite's base manifests runs `agnhost
// porter` on SCTP ports in two of its containers, and porter exits when it cannot listen
// on SCTP, so on such a kernel every test would fail at setup; without those containers
// the pods start and only the tests' SCTP probes cannot succeed (docs/conformance.md).
package strip

import (
	"bytes"
	"fmt"
)

// WithoutSCTP returns the suite's base manifests without the containers that serve
// SCTP (`agnhost porter` with a SERVE_SCTP_PORT_ variable), and how many it removed. The
// manifests are a Go template (the suite fills in host-network ports), not YAML, so they
// are edited as text: a container is a "- name:" list item with every line indented
// deeper than its dash. Anything SCTP left afterwards is an error, so that a new shape of
// SCTP server in a new version of the module is noticed, not silently kept.
func WithoutSCTP(manifests []byte) ([]byte, int, error) {
	lines := bytes.SplitAfter(manifests, []byte("\n"))
	var out bytes.Buffer
	removed := 0
	for i := 0; i < len(lines); i++ {
		dash, ok := listItemIndent(lines[i])
		if !ok {
			out.Write(lines[i])
			continue
		}
		end := i + 1
		for end < len(lines) && (isBlank(lines[end]) || indent(lines[end]) > dash) {
			end++
		}
		block := bytes.Join(lines[i:end], nil)
		if bytes.Contains(block, []byte("agnhost porter")) && bytes.Contains(block, []byte("SERVE_SCTP_PORT_")) {
			removed++
			i = end - 1
			continue
		}
		out.Write(lines[i])
	}
	if bytes.Contains(bytes.ToUpper(out.Bytes()), []byte("SCTP")) {
		return nil, removed, fmt.Errorf("the base manifests still mention SCTP after removing %d porter containers: has the module changed how its pods serve SCTP?", removed)
	}
	if removed == 0 {
		return nil, 0, fmt.Errorf("found no SCTP porter container in the base manifests: has the module changed?")
	}
	return out.Bytes(), removed, nil
}

// listItemIndent reports whether line is a "- name:" list item, and the column of its dash.
func listItemIndent(line []byte) (int, bool) {
	n := indent(line)
	return n, bytes.HasPrefix(line[n:], []byte("- name:"))
}

func indent(line []byte) int {
	return len(line) - len(bytes.TrimLeft(line, " "))
}

func isBlank(line []byte) bool {
	return len(bytes.TrimSpace(line)) == 0
}
