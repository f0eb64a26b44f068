package framework

import (
	"cmp"
	"fmt"
	"os/exec"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/kovs-net/kovs/go-controller/pkg/ovs"
	"github.com/kovs-net/kovs/go-controller/pkg/pipeline"
)

// Flow is one flow of a node's br-int as ovs-ofctl dumps it.
type Flow struct {
	Cookie uint64
	// Age is how long ago the flow was installed (its duration).
	Age time.Duration
	// Text is the flow without its cookie and counters: table, priority, match, actions.
	Text string
	// Table and Priority as ovs.ParseFlow reads them (Table -1 if it could not).
	Table, Priority int
	// Packets is the flow's packet counter (n_packets) at the dump.
	Packets uint64
}

// flowCounters are the fields of a dumped flow that change by themselves.
var flowCounters = regexp.MustCompile(`\b(cookie|duration|n_packets|n_bytes|idle_age|hard_age)=[^,\s]+,?\s*`)

var flowDuration = regexp.MustCompile(`\bduration=([0-9.]+)s`)

var flowPackets = regexp.MustCompile(`\bn_packets=([0-9]+)`)

// DumpFlows reads the flows of node's br-int.
func (s *Sandbox) DumpFlows(t testing.TB, node string) []Flow {
	t.Helper()
	flows, err := s.ListFlows(node)
	if err != nil {
		t.Fatal(err)
	}
	return flows
}

// ListFlows reads the flows of node's br-int.
func (s *Sandbox) ListFlows(node string) ([]Flow, error) {
	lines, err := ofctl("dump-flows", s.BrIntTarget(node))
	if err != nil {
		return nil, err
	}
	var flows []Flow
	for _, line := range lines {
		if f, ok := ParseFlow(line); ok {
			flows = append(flows, f)
		}
	}
	return flows, nil
}

// ParseFlow parses one line of `ovs-ofctl dump-flows`; ok is false for other lines.
func ParseFlow(line string) (f Flow, ok bool) {
	line = strings.TrimSpace(line)
	if !strings.HasPrefix(line, "cookie=") {
		return Flow{}, false
	}
	f.Text = flowCounters.ReplaceAllString(line, "")
	f.Table, f.Priority = -1, ovs.DefaultPriority
	if e, err := ovs.ParseFlow(line); err == nil {
		f.Table, f.Priority = e.Table, e.Priority
	}
	c, _, _ := strings.Cut(strings.TrimPrefix(line, "cookie="), ",")
	f.Cookie, _ = strconv.ParseUint(c, 0, 64)
	if m := flowDuration.FindStringSubmatch(line); m != nil {
		secs, _ := strconv.ParseFloat(m[1], 64)
		f.Age = time.Duration(secs * float64(time.Second))
	}
	if m := flowPackets.FindStringSubmatch(line); m != nil {
		f.Packets, _ = strconv.ParseUint(m[1], 10, 64)
	}
	return f, true
}

// FlowPackets is the sum of the packet counters of node's br-int flows in table at
// priority whose text (Flow.Text) contains match: how many packets a given flow, a drop
// flow for instance, has taken. It fails the test if no flow is like that.
func (s *Sandbox) FlowPackets(t testing.TB, node string, table, priority int, match string) uint64 {
	t.Helper()
	var n uint64
	found := false
	for _, f := range s.DumpFlows(t, node) {
		if f.Table == table && f.Priority == priority && strings.Contains(f.Text, match) {
			n += f.Packets
			found = true
		}
	}
	if !found {
		t.Fatalf("%s's br-int has no flow in table %d at priority %d with %q", node, table, priority, match)
	}
	return n
}

// DumpGroups reads the groups of node's br-int, by group ID.
func (s *Sandbox) DumpGroups(t testing.TB, node string) map[uint32]string {
	t.Helper()
	groups := map[uint32]string{}
	for _, line := range s.ofctl(t, "dump-groups", s.BrIntTarget(node)) {
		line = strings.TrimSpace(line)
		id, ok := strings.CutPrefix(line, "group_id=")
		if !ok {
			continue
		}
		id, _, _ = strings.Cut(id, ",")
		n, err := strconv.ParseUint(id, 0, 32)
		if err != nil {
			t.Fatalf("%s: group %q: %v", node, line, err)
		}
		groups[uint32(n)] = line
	}
	return groups
}

func (s *Sandbox) ofctl(t testing.TB, args ...string) []string {
	t.Helper()
	lines, err := ofctl(args...)
	if err != nil {
		t.Fatal(err)
	}
	return lines
}

func ofctl(args ...string) ([]string, error) {
	out, err := exec.Command("ovs-ofctl", append([]string{"-O", "OpenFlow15"}, args...)...).CombinedOutput()
	if err != nil {
		return nil, fmt.Errorf("ovs-ofctl %s: %w: %s", strings.Join(args, " "), err, out)
	}
	return strings.Split(string(out), "\n"), nil
}

// DumpMeters reads the pods' bandwidth meters of node's br-int, by ID (ListMeters).
func (s *Sandbox) DumpMeters(t testing.TB, node string) []ovs.Meter {
	t.Helper()
	meters, err := s.ListMeters(node)
	if err != nil {
		t.Fatal(err)
	}
	return meters
}

// PodMeters are the pods' bandwidth meters of a br-int's meters: all but the audit log's
// packet-in meter, which the agent keeps whether or not a pod is limited (docs/audit.md).
func PodMeters(meters []ovs.Meter) []ovs.Meter {
	return slices.DeleteFunc(meters, func(m ovs.Meter) bool { return m.ID == pipeline.AuditMeterID })
}

// ListMeters reads the pods' bandwidth meters of node's br-int (PodMeters), by ID.
func (s *Sandbox) ListMeters(node string) ([]ovs.Meter, error) {
	lines, err := ofctl("dump-meters", s.BrIntTarget(node))
	if err != nil {
		return nil, err
	}
	all, err := ovs.ParseMeterDump(strings.Join(lines, "\n"))
	if err != nil {
		return nil, err
	}
	meters := PodMeters(all)
	slices.SortFunc(meters, func(a, b ovs.Meter) int { return cmp.Compare(a.ID, b.ID) })
	return meters, nil
}
