package ovsfake

import (
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/kovs-net/kovs/go-controller/pkg/ovs"
)

// fakeTables is the state a OpenFlow bundle works on.
type fakeTables struct {
	flows  map[flowKey]ovs.FlowEntry
	groups map[uint32]ovs.GroupEntry
}

// flowFilter is what a modify or delete selects flows by.
type flowFilter struct {
	table      int
	hasTable   bool
	priority   int
	cookie     uint64
	cookieMask uint64
	match      []string
}

// groupRefRE finds the groups a flow's actions output to.
var groupRefRE = regexp.MustCompile(`\bgroup:(\d+)`)

// apply applies one mod, validated and rendered as Bundle would send it.
func (t *fakeTables) apply(m ovs.Mod) error {
	text, err := ovs.BundleText([]ovs.Mod{m})
	if err != nil {
		return err
	}
	kind, rest, _ := strings.Cut(strings.TrimSuffix(text, "\n"), " ")
	op, text, _ := strings.Cut(rest, " ")
	if kind == "group" {
		return t.applyGroup(ovs.GroupOp(op), text)
	}
	return t.applyFlow(ovs.FlowOp(op), text)
}

func (t *fakeTables) applyFlow(op ovs.FlowOp, text string) error {
	switch op {
	case ovs.FlowAdd:
		e, err := t.parseFlowWithGroups(text)
		if err == nil {
			t.flows[keyOf(e.Table, e.Priority, e.Match)] = e
		}
		return err
	case ovs.FlowModifyStrict:
		e, err := t.parseFlowWithGroups(text)
		if err != nil {
			return err
		}
		if old, ok := t.flows[keyOf(e.Table, e.Priority, e.Match)]; ok {
			old.Actions = e.Actions
			t.flows[keyOf(e.Table, e.Priority, e.Match)] = old
		}
		return nil
	case ovs.FlowModify:
		return t.modifyFlows(text)
	case ovs.FlowDelete, ovs.FlowDeleteStrict:
		filter, err := parseFlowFilter(text)
		if err != nil {
			return err
		}
		maps.DeleteFunc(t.flows, func(k flowKey, e ovs.FlowEntry) bool { return filter.selects(e, op == ovs.FlowDeleteStrict) })
		return nil
	}
	return fmt.Errorf("unknown flow command %q", op)
}

// modifyFlows sets the actions of every flow the (non-strict) filter selects.
func (t *fakeTables) modifyFlows(text string) error {
	head, _, _ := ovs.SplitActions(text)
	filter, err := parseFlowFilter(head)
	if err != nil {
		return err
	}
	e, err := t.parseFlowWithGroups(text)
	if err != nil {
		return err
	}
	for k, old := range t.flows {
		if filter.selects(old, false) {
			old.Actions = e.Actions
			t.flows[k] = old
		}
	}
	return nil
}

// parseFlowWithGroups parses a flow and checks that the groups it outputs to exist.
func (t *fakeTables) parseFlowWithGroups(text string) (ovs.FlowEntry, error) {
	e, err := ovs.ParseFlow(text)
	if err != nil {
		return ovs.FlowEntry{}, err
	}
	for _, m := range groupRefRE.FindAllStringSubmatch(e.Actions, -1) {
		id, _ := strconv.ParseUint(m[1], 10, 32)
		if _, ok := t.groups[uint32(id)]; !ok {
			return ovs.FlowEntry{}, fmt.Errorf("OFPBAC_BAD_OUT_GROUP: group %d does not exist", id)
		}
	}
	return e, nil
}

func (t *fakeTables) applyGroup(op ovs.GroupOp, text string) error {
	if op == ovs.GroupDelete {
		return t.deleteGroup(text)
	}
	g, err := parseGroupLine(text)
	if err != nil {
		return err
	}
	_, exists := t.groups[g.ID]
	switch {
	case op == ovs.GroupAdd && exists:
		return fmt.Errorf("OFPGMFC_GROUP_EXISTS: group %d exists", g.ID)
	case op == ovs.GroupModify && !exists:
		return fmt.Errorf("OFPGMFC_UNKNOWN_GROUP: group %d does not exist", g.ID)
	}
	t.groups[g.ID] = g
	return nil
}

// deleteGroup deletes a group ("group_id=N") or all ("group_id=all"), and,
// as OpenFlow requires, the flows that output to it.
func (t *fakeTables) deleteGroup(text string) error {
	id, all := uint32(0), strings.HasPrefix(text, "group_id=all")
	if !all {
		g, err := parseGroupLine(text)
		if err != nil {
			return err
		}
		id = g.ID
	}
	maps.DeleteFunc(t.groups, func(gid uint32, _ ovs.GroupEntry) bool { return all || gid == id })
	maps.DeleteFunc(t.flows, func(_ flowKey, e ovs.FlowEntry) bool {
		for _, m := range groupRefRE.FindAllStringSubmatch(e.Actions, -1) {
			if all || m[1] == strconv.FormatUint(uint64(id), 10) {
				return true
			}
		}
		return false
	})
	return nil
}

// parseFlowFilter parses the selection part of a modify or delete.
func parseFlowFilter(text string) (flowFilter, error) {
	f := flowFilter{priority: ovs.DefaultPriority}
	for _, tok := range strings.FieldsFunc(text, isFieldSeparator) {
		key, val, _ := strings.Cut(tok, "=")
		var err error
		switch key {
		case "table":
			f.hasTable = true
			f.table, err = strconv.Atoi(val)
		case "priority":
			f.priority, err = strconv.Atoi(val)
		case "cookie":
			f.cookie, f.cookieMask, err = parseCookieMask(val)
		default:
			f.match = append(f.match, tok)
		}
		if err != nil {
			return flowFilter{}, fmt.Errorf("bad %s: %w", tok, err)
		}
	}
	return f, nil
}

// parseCookieMask parses "value/mask"; a mask of -1 is all ones.
func parseCookieMask(s string) (uint64, uint64, error) {
	value, mask, ok := strings.Cut(s, "/")
	if !ok {
		return 0, 0, fmt.Errorf("cookie %q has no mask", s)
	}
	v, err := strconv.ParseUint(value, 0, 64)
	if err != nil {
		return 0, 0, err
	}
	if mask == "-1" {
		return v, ^uint64(0), nil
	}
	m, err := strconv.ParseUint(mask, 0, 64)
	return v, m, err
}

// selects reports whether the filter picks flow e. A strict filter needs the
// same table, priority and match; a loose one, a match that includes its fields.
func (f flowFilter) selects(e ovs.FlowEntry, strict bool) bool {
	if e.Cookie&f.cookieMask != f.cookie&f.cookieMask {
		return false
	}
	if strict {
		return keyOf(e.Table, e.Priority, e.Match) == keyOf(f.table, f.priority, strings.Join(f.match, ","))
	}
	if f.hasTable && e.Table != f.table {
		return false
	}
	have := strings.Split(e.Match, ",")
	for _, m := range f.match {
		if !slices.Contains(have, m) {
			return false
		}
	}
	return true
}

// keyOf is the identity of a flow for strict mods.
func keyOf(table, priority int, match string) flowKey {
	fields := strings.FieldsFunc(match, isFieldSeparator)
	slices.Sort(fields)
	return flowKey{table: table, priority: priority, match: strings.Join(fields, ",")}
}

// isFieldSeparator reports whether r separates fields of a flow's match part.
func isFieldSeparator(r rune) bool { return r == ',' || r == ' ' || r == '\t' }

// parseGroupLine parses a group mod's text as dump-groups would show the group.
func parseGroupLine(text string) (ovs.GroupEntry, error) {
	groups, err := ovs.ParseGroupDump(text)
	if err != nil {
		return ovs.GroupEntry{}, err
	}
	if len(groups) != 1 {
		return ovs.GroupEntry{}, fmt.Errorf("group mod %q is not one group", text)
	}
	return groups[0], nil
}
