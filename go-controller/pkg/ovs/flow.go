package ovs

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// FlowKey is what OpenFlow identifies a flow by: its table, its priority and its match.
// Two flows with the same key are the same flow: adding one replaces the other.
type FlowKey struct {
	Table    uint8
	Priority uint16
	// Match is the match fields as dump-flows prints them, e.g. "ip,in_port=3"; empty
	// matches every packet.
	Match string
}

// String renders the key as a strict flow mod selects a flow: "table=10,priority=200,ip".
func (k FlowKey) String() string {
	s := "table=" + strconv.Itoa(int(k.Table)) + ",priority=" + strconv.Itoa(int(k.Priority))
	if k.Match != "" {
		s += "," + k.Match
	}
	return s
}

// Selection renders the key as a non-strict dump-flows selects flows: "table=10,ip" (the
// priority only strict commands take is left out).
func (k FlowKey) Selection() string {
	s := "table=" + strconv.Itoa(int(k.Table))
	if k.Match != "" {
		s += "," + k.Match
	}
	return s
}

// Flow is one flow as kovs installs it and `dump-flows --no-stats --no-names` prints it:
// its key, its cookie and its actions, all in ovs-ofctl's own canonical syntax, so a
// desired flow and a dumped one are equal exactly when the switch has what was wanted.
type Flow struct {
	FlowKey
	Cookie uint64
	// Actions are the actions as dump-flows prints them, e.g. "goto_table:30"; "drop"
	// for none.
	Actions string
}

// String renders the flow as `ovs-ofctl -O OpenFlow15 dump-flows --no-stats` prints it
// (without the leading space), which is also what add-flow and a bundle's "flow add"
// take. Like dump-flows it omits a zero cookie and "table=0, ".
func (f Flow) String() string {
	return FlowEntry{Cookie: f.Cookie, Table: int(f.Table), Priority: int(f.Priority), Match: f.Match, Actions: f.Actions}.String()
}

// Add is the mod that adds the flow, replacing the flow with the same key.
func (f Flow) Add() FlowMod { return AddFlow(f.String()) }

// DeleteStrict is the mod that deletes the flow with exactly this key.
func (k FlowKey) DeleteStrict() FlowMod { return FlowMod{Op: FlowDeleteStrict, Flow: k.String()} }

// Flow is the entry without its statistics. It fails for an entry whose table the dump
// named instead of numbering (dump with --no-names) or whose numbers are out of range.
func (e FlowEntry) Flow() (Flow, error) {
	if e.Table < 0 || e.Table > 255 || e.Priority < 0 || e.Priority > 65535 {
		return Flow{}, fmt.Errorf("flow %q: table %d (%q) or priority %d is not an OpenFlow table number and priority",
			e.String(), e.Table, e.TableName, e.Priority)
	}
	return Flow{FlowKey: FlowKey{Table: uint8(e.Table), Priority: uint16(e.Priority), Match: e.Match},
		Cookie: e.Cookie, Actions: e.Actions}, nil
}

// Group is one OpenFlow group as `ovs-ofctl -O OpenFlow15 dump-groups` prints it.
type Group struct {
	ID   uint32
	Type string // select, all, indirect or fast_failover
	// Method is a select group's selection_method ("hash"; empty: the default), Fields
	// the fields it hashes.
	Method string
	Fields []string
	// Buckets are printed with their IDs, as OpenFlow 1.5 dumps them.
	Buckets []Bucket
}

// Bucket is one bucket of a group.
type Bucket struct {
	ID      uint32
	Actions string // as dump-groups prints them; "drop" for none
}

// String renders the group as dump-groups prints it (without the leading space); a
// bundle's "group add" takes the same text.
func (g Group) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "group_id=%d,type=%s", g.ID, g.Type)
	if g.Method != "" {
		b.WriteString(",selection_method=" + g.Method)
	}
	if len(g.Fields) > 0 {
		b.WriteString(",fields(" + strings.Join(g.Fields, ",") + ")")
	}
	for _, bk := range g.Buckets {
		fmt.Fprintf(&b, ",bucket=bucket_id:%d,actions=%s", bk.ID, bk.Actions)
	}
	return b.String()
}

// Equal reports whether two groups are the same.
func (g Group) Equal(o Group) bool {
	return g.ID == o.ID && g.Type == o.Type && g.Method == o.Method && slices.Equal(g.Fields, o.Fields) &&
		slices.Equal(g.Buckets, o.Buckets)
}

// Add is the mod that adds the group; it fails if the group exists.
func (g Group) Add() GroupMod { return GroupMod{Op: GroupAdd, Group: g.String()} }

// Modify is the mod that replaces the existing group of the same ID.
func (g Group) Modify() GroupMod { return GroupMod{Op: GroupModify, Group: g.String()} }

// DeleteGroup is the mod that deletes group id (and, as OpenFlow requires, the flows that
// output to it).
func DeleteGroup(id uint32) GroupMod {
	return GroupMod{Op: GroupDelete, Group: "group_id=" + strconv.FormatUint(uint64(id), 10)}
}

// Group parses the entry's text into a Group.
func (e GroupEntry) Group() (Group, error) { return ParseGroup(e.Text) }

// ParseGroup parses one group as dump-groups prints it (OpenFlow 1.5: buckets with
// bucket_id), e.g.
// "group_id=1,type=select,selection_method=hash,fields(ip_src,ip_dst),bucket=bucket_id:0,actions=output:3".
func ParseGroup(text string) (Group, error) {
	text = strings.TrimSpace(text)
	parts := strings.Split(text, ",bucket=")
	g, err := parseGroupHead(parts[0], true)
	if err != nil {
		return Group{}, fmt.Errorf("group %q: %w", text, err)
	}
	for _, p := range parts[1:] {
		idText, actions, ok := strings.Cut(p, ",actions=")
		id, found := strings.CutPrefix(idText, "bucket_id:")
		if !ok || !found {
			return Group{}, fmt.Errorf("group %q: bucket %q lacks bucket_id: or actions=", text, p)
		}
		n, err := strconv.ParseUint(id, 10, 32)
		if err != nil {
			return Group{}, fmt.Errorf("group %q: bucket_id %q: %w", text, id, err)
		}
		g.Buckets = append(g.Buckets, Bucket{ID: uint32(n), Actions: actions})
	}
	return g, nil
}

// parseGroupHead parses what comes before the buckets. Strict, it refuses properties a
// Group does not hold (it would not render back as dumped).
func parseGroupHead(head string, strict bool) (Group, error) {
	var g Group
	if fields, ok := strings.CutSuffix(head, ")"); ok {
		i := strings.Index(fields, ",fields(")
		if i < 0 {
			return Group{}, fmt.Errorf("unbalanced %q", head)
		}
		head, g.Fields = fields[:i], strings.Split(fields[i+len(",fields("):], ",")
	}
	seenID := false
	for _, tok := range strings.Split(head, ",") {
		key, val, _ := strings.Cut(tok, "=")
		switch key {
		case "group_id":
			id, err := strconv.ParseUint(val, 0, 32)
			if err != nil {
				return Group{}, fmt.Errorf("bad group_id: %w", err)
			}
			g.ID, seenID = uint32(id), true
		case "type":
			g.Type = val
		case "selection_method":
			g.Method = val
		default:
			if strict {
				return Group{}, fmt.Errorf("unknown group property %q", tok)
			}
		}
	}
	if !seenID {
		return Group{}, fmt.Errorf("no group_id")
	}
	return g, nil
}

// MatchField is one field of a match as dump-flows prints it: "in_port=3" is
// {in_port 3}, the protocol shorthand "ip" is {ip ""}.
type MatchField struct{ Name, Value string }

// MatchFields splits a match (FlowKey.Match, FlowEntry.Match) into its fields, in order.
func MatchFields(match string) []MatchField {
	var out []MatchField
	for _, tok := range strings.FieldsFunc(match, isFieldSeparator) {
		name, value, _ := strings.Cut(tok, "=")
		out = append(out, MatchField{Name: name, Value: value})
	}
	return out
}

// MatchValue is the value of the named field of a match; ok is false without it.
func MatchValue(match, name string) (value string, ok bool) {
	for _, f := range MatchFields(match) {
		if f.Name == name {
			return f.Value, true
		}
	}
	return "", false
}

// ConjunctionIDs are the IDs of the conjunction(id,k/n) actions of a flow's actions, in
// order.
func ConjunctionIDs(actions string) []uint32 {
	var ids []uint32
	for rest := actions; ; {
		i := strings.Index(rest, "conjunction(")
		if i < 0 {
			return ids
		}
		rest = rest[i+len("conjunction("):]
		id, _, _ := strings.Cut(rest, ",")
		if n, err := strconv.ParseUint(id, 10, 32); err == nil {
			ids = append(ids, uint32(n))
		}
	}
}
