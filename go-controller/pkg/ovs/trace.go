package ovs

import (
	"regexp"
	"strconv"
	"strings"
)

// TraceStep is one flow an ofproto/trace went through.
type TraceStep struct {
	Table    uint8
	Match    string
	Priority int
	Cookie   uint64
	Actions  []string // the actions, as the trace lists them
	Notes    []string // the trace's "-> ..." explanations
}

// Trace is what one ofproto/trace on one bridge showed.
type Trace struct {
	Steps           []TraceStep
	DatapathActions string // the last "Datapath actions:" line
	// OutputPorts lists the OpenFlow ports the packet was output to, in order.
	OutputPorts []int
	// TunnelDst is the outer destination when the packet left through the tunnel.
	TunnelDst string
	// Continuations are the points where the trace resumed after conntrack (a ct()
	// action with table=), with the ct_state it resumed with.
	Continuations []TraceContinuation
}

// TraceContinuation is a resumption after conntrack: before Steps[Step], with CtState.
type TraceContinuation struct {
	Step    int
	CtState string // as ofproto/trace prints it, e.g. "new|trk"
}

var (
	stepLine   = regexp.MustCompile(`^\s*(\d+)\.\s+(.*?),?\s*priority (\d+)(?:, cookie (0x[0-9a-f]+))?\s*$`)
	outputPort = regexp.MustCompile(`-> output port is (\d+)`)
	tunnelTo   = regexp.MustCompile(`-> tunneling to (\S+) via`)
	outputAct  = regexp.MustCompile(`^output:(\d+)$`)
	resumeCT   = regexp.MustCompile(`^recirc\(0x[0-9a-f]+\) - resume conntrack with ct_state=(\S+)`)
)

// ParseTrace reads the text ovs-appctl ofproto/trace prints.
//
// Only the steps on bridge are kept: after a tunnel push the trace goes on through the
// uplink bridge, which is not kovs's. The trace prints a ct() action's nested actions on
// the lines after it ("drop" when there are none); they are folded into the ct() action.
func ParseTrace(text, bridge string) Trace {
	var t Trace
	var cur *TraceStep
	onBridge := true
	for _, raw := range strings.Split(text, "\n") {
		line := strings.TrimSpace(raw)
		switch {
		case resumeCT.MatchString(line):
			t.Continuations = append(t.Continuations, TraceContinuation{Step: len(t.Steps), CtState: resumeCT.FindStringSubmatch(line)[1]})
			cur = nil
		case strings.HasPrefix(line, "bridge(\""):
			onBridge = strings.HasPrefix(line, "bridge(\""+bridge+"\")")
			cur = nil
		case !onBridge:
		case stepLine.MatchString(raw):
			m := stepLine.FindStringSubmatch(raw)
			table, _ := strconv.Atoi(m[1])
			prio, _ := strconv.Atoi(m[3])
			var cookie uint64
			if m[4] != "" {
				cookie, _ = strconv.ParseUint(strings.TrimPrefix(m[4], "0x"), 16, 64)
			}
			t.Steps = append(t.Steps, TraceStep{Table: uint8(table), Match: m[2], Priority: prio, Cookie: cookie})
			cur = &t.Steps[len(t.Steps)-1]
		case strings.HasPrefix(line, "Datapath actions:"):
			t.DatapathActions = strings.TrimSpace(strings.TrimPrefix(line, "Datapath actions:"))
			cur = nil
		case strings.HasPrefix(line, "Final flow:") || strings.HasPrefix(line, "Megaflow:") || strings.HasPrefix(line, "----"):
			cur = nil
		case cur != nil && strings.HasPrefix(line, "->"):
			cur.Notes = append(cur.Notes, strings.TrimSpace(strings.TrimPrefix(line, "->")))
			if m := outputPort.FindStringSubmatch(line); m != nil {
				p, _ := strconv.Atoi(m[1])
				t.OutputPorts = append(t.OutputPorts, p)
			}
			if m := tunnelTo.FindStringSubmatch(line); m != nil {
				t.TunnelDst = m[1]
			}
		case cur != nil && line == ">> skipping output to input port" && len(t.OutputPorts) > 0:
			// OVS outputs to the input port only with the in_port action: this output
			// sent nothing.
			t.OutputPorts = t.OutputPorts[:len(t.OutputPorts)-1]
		case cur != nil && line != "" && isNestedCTAction(cur, line):
		case cur != nil && line != "":
			cur.Actions = append(cur.Actions, line)
			if m := outputAct.FindStringSubmatch(line); m != nil {
				p, _ := strconv.Atoi(m[1])
				t.OutputPorts = append(t.OutputPorts, p)
			}
		}
	}
	return t
}

// Dropped reports whether the packet went nowhere.
func (t Trace) Dropped() bool {
	return len(t.OutputPorts) == 0 && !strings.Contains(t.DatapathActions, "userspace")
}

// ReturnedToSender reports whether the bridge answered the packet on its own ingress
// port (an ARP or ND reply built in OVS).
func (t Trace) ReturnedToSender() bool {
	for _, s := range t.Steps {
		for _, a := range s.Actions {
			if a == "IN_PORT" || a == "in_port" {
				return true
			}
		}
	}
	return false
}

// LastStep is the final flow the packet matched.
func (t Trace) LastStep() (TraceStep, bool) {
	if len(t.Steps) == 0 {
		return TraceStep{}, false
	}
	return t.Steps[len(t.Steps)-1], true
}

// isNestedCTAction reports whether line is what the trace prints for the nested actions
// of the ct() action just before it.
func isNestedCTAction(s *TraceStep, line string) bool {
	if len(s.Actions) == 0 || !strings.HasPrefix(s.Actions[len(s.Actions)-1], "ct(") {
		return false
	}
	return line == "drop" || line == "nat"
}
