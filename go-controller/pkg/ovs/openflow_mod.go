package ovs

import (
	"errors"
	"fmt"
	"strings"
)

// FlowOp is the command of a flow mod, as an ovs-ofctl bundle file spells it.
type FlowOp string

// Flow mod commands.
const (
	// FlowAdd adds a flow, replacing one with the same table, priority and
	// match (cookie and actions included). It is the only way to change a
	// flow's cookie: under OpenFlow 1.1+ modify keeps the old cookie.
	FlowAdd FlowOp = "add"
	// FlowModify changes the actions of every flow the match covers.
	FlowModify FlowOp = "modify"
	// FlowModifyStrict changes the actions of the flow with exactly this
	// table, priority and match; it adds nothing if there is none.
	FlowModifyStrict FlowOp = "modify_strict"
	// FlowDelete deletes every flow the match (and cookie/mask) covers.
	FlowDelete FlowOp = "delete"
	// FlowDeleteStrict deletes the flow with exactly this table, priority and match.
	FlowDeleteStrict FlowOp = "delete_strict"
)

// GroupOp is the command of a group mod, as an ovs-ofctl bundle file spells it.
type GroupOp string

// Group mod commands.
const (
	GroupAdd         GroupOp = "add"
	GroupModify      GroupOp = "modify"
	GroupAddOrModify GroupOp = "add_or_mod"
	GroupDelete      GroupOp = "delete"
)

// Mod is one line of an OpenFlow bundle: a FlowMod or a GroupMod.
type Mod interface {
	// bundleLine renders the mod as a line of an ovs-ofctl bundle file.
	bundleLine() (string, error)
}

// FlowMod is a flow mod whose flow is already rendered in ovs-ofctl syntax, as
// `dump-flows --no-stats` prints it or `add-flow` takes it, e.g.
// "cookie=0x1, table=10, priority=200,ip,in_port=3 actions=goto_table:30".
//
// For the delete commands the text may be the whole flow: the actions are
// dropped and a cookie without a mask becomes an exact match (cookie=V/-1),
// since ovs-ofctl rejects both in a delete. A strict delete without table=
// means table 0, like the flow's add (ovs-ofctl would apply it to every
// table); a loose delete without table= still covers every table.
type FlowMod struct {
	Op   FlowOp
	Flow string
}

// GroupMod is a group mod rendered in ovs-ofctl syntax, e.g.
// "group_id=1,type=select,bucket=actions=output:3".
type GroupMod struct {
	Op    GroupOp
	Group string
}

// AddFlow returns the mod that adds (or replaces) flow.
func AddFlow(flow string) FlowMod { return FlowMod{Op: FlowAdd, Flow: flow} }

// ModifyFlowStrict returns the mod that changes the actions of exactly flow.
func ModifyFlowStrict(flow string) FlowMod { return FlowMod{Op: FlowModifyStrict, Flow: flow} }

// DeleteFlowStrict returns the mod that deletes exactly flow.
func DeleteFlowStrict(flow string) FlowMod { return FlowMod{Op: FlowDeleteStrict, Flow: flow} }

// DeleteFlowsByCookie returns the mod that deletes every flow whose cookie
// matches cookie under mask.
func DeleteFlowsByCookie(cookie, mask uint64) FlowMod {
	return FlowMod{Op: FlowDelete, Flow: fmt.Sprintf("cookie=%#x/%#x", cookie, mask)}
}

func (m FlowMod) bundleLine() (string, error) {
	if err := checkLine(m.Flow); err != nil {
		return "", err
	}
	text := strings.TrimSpace(m.Flow)
	switch m.Op {
	case FlowAdd, FlowModify, FlowModifyStrict:
		if text == "" {
			return "", fmt.Errorf("flow %s with no flow", m.Op)
		}
	case FlowDelete, FlowDeleteStrict:
		text = deleteMatch(text, m.Op == FlowDeleteStrict)
	default:
		return "", fmt.Errorf("unknown flow command %q", m.Op)
	}
	return strings.TrimSpace("flow " + string(m.Op) + " " + text), nil
}

func (m GroupMod) bundleLine() (string, error) {
	if err := checkLine(m.Group); err != nil {
		return "", err
	}
	switch m.Op {
	case GroupAdd, GroupModify, GroupAddOrModify, GroupDelete:
	default:
		return "", fmt.Errorf("unknown group command %q", m.Op)
	}
	text := strings.TrimSpace(m.Group)
	if text == "" {
		return "", fmt.Errorf("group %s with no group", m.Op)
	}
	return "group " + string(m.Op) + " " + text, nil
}

// checkLine refuses text that would split into several bundle lines.
func checkLine(text string) error {
	if strings.ContainsAny(text, "\r\n") {
		return errors.New("mod text spans several lines")
	}
	return nil
}

// deleteMatch turns a flow into what a delete takes: no actions, and an
// unmasked cookie made an exact match. A strict delete without a table gets
// table=0, as an add does: ovs-ofctl would delete the flow from every table.
func deleteMatch(flow string, strict bool) string {
	head, _, _ := SplitActions(flow)
	tokens := strings.FieldsFunc(head, isFieldSeparator)
	hasTable := false
	for i, tok := range tokens {
		if v, ok := strings.CutPrefix(tok, "cookie="); ok && !strings.Contains(v, "/") {
			tokens[i] = tok + "/-1"
		}
		hasTable = hasTable || strings.HasPrefix(tok, "table=")
	}
	if strict && !hasTable {
		tokens = append([]string{"table=0"}, tokens...)
	}
	return strings.Join(tokens, ",")
}

// BundleText renders mods as an ovs-ofctl bundle file, one mod per line, as
// Bundle applies it.
func BundleText(mods []Mod) (string, error) {
	var b strings.Builder
	for i, m := range mods {
		if m == nil {
			return "", fmt.Errorf("bundle line %d: nil mod", i+1)
		}
		line, err := m.bundleLine()
		if err != nil {
			return "", fmt.Errorf("bundle line %d: %w", i+1, err)
		}
		b.WriteString(line)
		b.WriteByte('\n')
	}
	return b.String(), nil
}
