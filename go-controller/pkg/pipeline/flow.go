package pipeline

import (
	"cmp"
	"fmt"
	"slices"
	"strings"

	"github.com/kovs-net/kovs/go-controller/pkg/ovs"
)

// Flow is one OpenFlow flow of br-int.
type Flow struct {
	Table    Table
	Priority uint16
	Cookie   Cookie
	Match    Match
	Actions  []Action
}

// String renders the flow exactly as `ovs-ofctl -O OpenFlow15 dump-flows --no-stats`
// prints it (without the leading space), which is also what `ovs-ofctl add-flow` and a
// bundle file's `flow add` take:
//
//	cookie=0x1000300000003, table=10, priority=200,ip,in_port=3,dl_src=...,nw_src=... actions=goto_table:30
//
// Like dump-flows it omits "table=0, " for table 0. pkg/ovs renders the line
// (ovs.Flow.String); this package renders the match and the actions.
func (f Flow) String() string { return f.Rendered().String() }

// Key is what OpenFlow identifies the flow by: table, priority and match.
func (f Flow) Key() ovs.FlowKey {
	return ovs.FlowKey{Table: f.Table.ID, Priority: f.Priority, Match: f.Match.String()}
}

// Rendered is the flow as the switch holds it: its key, cookie and actions in ovs-ofctl
// syntax. A desired flow and a dumped one (ovs.FlowEntry.Flow) are equal exactly when the
// switch has the flow as wanted.
func (f Flow) Rendered() ovs.Flow {
	return ovs.Flow{FlowKey: f.Key(), Cookie: uint64(f.Cookie), Actions: formatActions(f.Actions)}
}

func formatActions(actions []Action) string {
	if len(actions) == 0 {
		return "drop"
	}
	texts := make([]string, 0, len(actions))
	for i, a := range actions {
		if _, drop := a.(Drop); drop && i > 0 {
			continue // OpenFlow's drop is no action: after another it is implied
		}
		texts = append(texts, a.String())
	}
	return strings.Join(texts, ",")
}

// SortFlows orders flows the way people read them: by table, then highest priority first,
// then by text.
//
// Each flow's text is rendered once, not in every comparison: rendering dominated the
// cost of sorting thousands of flows.
func SortFlows(flows []Flow) {
	keyed := make([]sortKey, len(flows))
	for i, f := range flows {
		keyed[i] = sortKey{flow: f, text: f.String()}
	}
	slices.SortStableFunc(keyed, func(a, b sortKey) int {
		return cmp.Or(
			cmp.Compare(a.flow.Table.ID, b.flow.Table.ID),
			cmp.Compare(b.flow.Priority, a.flow.Priority),
			cmp.Compare(a.text, b.text),
		)
	})
	for i := range keyed {
		flows[i] = keyed[i].flow
	}
}

type sortKey struct {
	flow Flow
	text string
}

// FormatByTable renders flows as an ovs-ofctl flow file, sorted and grouped under a comment
// line per table that names it, its phase and its miss action. `ovs-ofctl add-flows` and
// `--bundle add-flows` accept the result as is ('#' lines are comments).
func FormatByTable(flows []Flow) string { return Stages().FormatByTable(flows) }

// FormatByTable is FormatByTable with the tables of the registry's stages.
func (r Registry) FormatByTable(flows []Flow) string {
	sorted := slices.Clone(flows)
	SortFlows(sorted)
	var b strings.Builder
	for i, f := range sorted {
		if i == 0 || f.Table.ID != sorted[i-1].Table.ID {
			if i > 0 {
				b.WriteString("\n")
			}
			b.WriteString(r.tableHeading(f.Table) + "\n")
		}
		b.WriteString(f.String() + "\n")
	}
	return b.String()
}

func (r Registry) tableHeading(t Table) string {
	if known, ok := r.TableByID(t.ID); ok {
		return fmt.Sprintf("# table %d %s (stage: %s; miss: %s)", known.ID, known.Name, known.Phase, known.Miss)
	}
	return fmt.Sprintf("# table %d (not a kovs table)", t.ID)
}
