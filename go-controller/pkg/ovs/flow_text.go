package ovs

import (
	"fmt"
	"strconv"
	"strings"
)

// DefaultPriority is the priority of a flow that does not give one; ovs-ofctl
// prints no priority= for it.
const DefaultPriority = 32768

// FlowEntry is one flow as ovs-ofctl dump-flows shows it, without the noise
// that changes from one dump to the next (duration, idle_age, ...).
type FlowEntry struct {
	Cookie    uint64
	Table     int    // table number; -1 if the dump named the table instead
	TableName string // the table's name, if the dump showed one instead of a number
	Priority  int
	Match     string // the match fields in OVS's order, e.g. "ip,in_port=3,nw_src=10.244.1.10"
	Actions   string // e.g. "ct(table=30,zone=1),goto_table:20"
	Packets   uint64
	Bytes     uint64
}

// String renders the flow as `dump-flows --no-stats` does (and the way
// pipeline.Flow renders flows): cookie and table only when non-zero.
func (f FlowEntry) String() string {
	var b strings.Builder
	if f.Cookie != 0 {
		fmt.Fprintf(&b, "cookie=%#x, ", f.Cookie)
	}
	switch {
	case f.TableName != "":
		fmt.Fprintf(&b, "table=%s, ", f.TableName)
	case f.Table != 0:
		fmt.Fprintf(&b, "table=%d, ", f.Table)
	}
	fmt.Fprintf(&b, "priority=%d", f.Priority)
	if f.Match != "" {
		b.WriteString("," + f.Match)
	}
	b.WriteString(" actions=" + f.Actions)
	return b.String()
}

// isFlowAttribute reports whether a field of a flow line is neither part of its
// match nor kept in FlowEntry: statistics, timeouts and flags.
func isFlowAttribute(key string) bool {
	switch key {
	case "duration", "idle_age", "hard_age", "idle_timeout", "hard_timeout", "importance",
		"send_flow_rem", "check_overlap", "reset_counts", "no_packet_counts", "no_byte_counts",
		"out_port", "out_group":
		return true
	}
	return false
}

// isKeptField reports whether a field of a flow line, outside its match, is
// one FlowEntry keeps.
func isKeptField(key string) bool {
	switch key {
	case "cookie", "table", "priority", "n_packets", "n_bytes":
		return true
	}
	return false
}

// ParseFlow parses one flow in ovs-ofctl syntax: a line of dump-flows output
// (with or without statistics) or a flow as add-flow takes it.
func ParseFlow(line string) (FlowEntry, error) {
	head, actions, ok := SplitActions(strings.TrimSpace(line))
	if !ok {
		return FlowEntry{}, fmt.Errorf("flow %q has no actions", line)
	}
	e := FlowEntry{Priority: DefaultPriority, Actions: strings.TrimSpace(actions)}
	var match []string
	seen := map[string]bool{}
	for _, tok := range strings.FieldsFunc(head, isFieldSeparator) {
		key, val, hasVal := strings.Cut(tok, "=")
		switch {
		case isFlowAttribute(key):
		case hasVal && isKeptField(key):
			if seen[key] { // ovs-ofctl writes each once: a second is not a dump's line
				return FlowEntry{}, fmt.Errorf("flow %q: %s given twice", line, key)
			}
			seen[key] = true
			if err := e.setHeadField(key, val); err != nil {
				return FlowEntry{}, fmt.Errorf("flow %q: %w", line, err)
			}
		default:
			match = append(match, tok)
		}
	}
	e.Match = strings.Join(match, ",")
	return e, nil
}

// setHeadField records a field of the flow line that is not part of the match.
func (e *FlowEntry) setHeadField(key, val string) error {
	var err error
	switch key {
	case "cookie":
		value, _, _ := strings.Cut(val, "/")
		e.Cookie, err = strconv.ParseUint(value, 0, 64)
	case "table":
		e.Table, err = strconv.Atoi(val)
		if err != nil {
			e.Table, e.TableName, err = -1, val, nil
		}
	case "priority":
		e.Priority, err = strconv.Atoi(val)
	case "n_packets":
		e.Packets, err = strconv.ParseUint(val, 10, 64)
	case "n_bytes":
		e.Bytes, err = strconv.ParseUint(val, 10, 64)
	}
	if err != nil {
		return fmt.Errorf("bad %s %q: %w", key, val, err)
	}
	return nil
}

// SplitActions splits a flow in ovs-ofctl syntax at "actions=" (preceded by a space, a
// comma or nothing) into what comes before (cookie, table, priority, match, attributes)
// and the actions.
func SplitActions(flow string) (head, actions string, found bool) {
	for from := 0; ; {
		i := strings.Index(flow[from:], "actions=")
		if i < 0 {
			return flow, "", false
		}
		at := from + i
		if at == 0 || isFieldSeparator(rune(flow[at-1])) {
			return strings.TrimRight(flow[:at], " ,\t"), flow[at+len("actions="):], true
		}
		from = at + 1
	}
}

// isFieldSeparator reports whether r separates fields of a flow's match part.
func isFieldSeparator(r rune) bool {
	return r == ',' || r == ' ' || r == '\t'
}

// ParseFlowDump parses the output of ovs-ofctl dump-flows, skipping reply
// headers such as "OFPST_FLOW reply (OF1.5) (xid=0x2):".
func ParseFlowDump(out string) ([]FlowEntry, error) {
	var flows []FlowEntry
	for i, line := range strings.Split(out, "\n") {
		line = strings.TrimSpace(line)
		if line == "" || isReplyHeader(line) {
			continue
		}
		f, err := ParseFlow(line)
		if err != nil {
			return nil, fmt.Errorf("dump line %d: %w", i+1, err)
		}
		flows = append(flows, f)
	}
	return flows, nil
}

// GroupEntry is one group as ovs-ofctl dump-groups shows it.
type GroupEntry struct {
	ID   uint32
	Type string // all, select, indirect or fast_failover
	Text string // the whole group, e.g. "group_id=1,type=select,bucket=..."
}

// ParseGroupDump parses the output of ovs-ofctl dump-groups.
func ParseGroupDump(out string) ([]GroupEntry, error) {
	var groups []GroupEntry
	for i, line := range strings.Split(out, "\n") {
		line = strings.TrimSpace(line)
		if line == "" || isReplyHeader(line) {
			continue
		}
		g, err := parseGroup(line)
		if err != nil {
			return nil, fmt.Errorf("dump line %d: %w", i+1, err)
		}
		groups = append(groups, g)
	}
	return groups, nil
}

func parseGroup(line string) (GroupEntry, error) {
	head, _, _ := strings.Cut(line, ",bucket=") // the buckets' fields are not the group's
	g, err := parseGroupHead(head, false)
	if err != nil {
		return GroupEntry{}, fmt.Errorf("group %q: %w", line, err)
	}
	return GroupEntry{ID: g.ID, Type: g.Type, Text: line}, nil
}

// isReplyHeader reports whether a line of ovs-ofctl output is the header of
// an OpenFlow reply rather than an entry.
func isReplyHeader(line string) bool {
	return strings.HasPrefix(line, "OFPST_") || strings.HasPrefix(line, "NXST_") ||
		strings.HasPrefix(line, "OFPT_")
}
