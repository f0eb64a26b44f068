package ovs

import (
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
)

// BundleError is a bundle that ovs-ofctl or ovs-vswitchd rejected. Nothing of
// the bundle was applied.
type BundleError struct {
	Bridge string
	// Line is the 1-based number of the failing mod in the bundle, 0 if it
	// could not be told.
	Line int
	// Mod is the failing line of the bundle file, "" if Line is 0.
	Mod string
	// Reason is why it failed: ovs-ofctl's parse error, or the OpenFlow error
	// and the message ovs-vswitchd rejected.
	Reason string
	// Err is the failed command.
	Err error
}

// Error names the bridge, the failing line and the reason.
func (e *BundleError) Error() string {
	if e.Line > 0 {
		return fmt.Sprintf("bundle on bridge %s: line %d (%s): %s; nothing applied", e.Bridge, e.Line, e.Mod, e.Reason)
	}
	return fmt.Sprintf("bundle on bridge %s: %s; nothing applied", e.Bridge, e.Reason)
}

// Unwrap returns the failed command's error.
func (e *BundleError) Unwrap() error { return e.Err }

var (
	// "ovs-ofctl: -:2: 9999999: output to unknown port": a line ovs-ofctl could not parse.
	parseErrorRE = regexp.MustCompile(`(?m)^ovs-ofctl: -:(\d+): (.*)$`)
	// "Error OFPBAC_BAD_OUT_GROUP for: OFPT_FLOW_MOD (OF1.5) (xid=0x9): ADD priority=23 actions=group:2":
	// a message ovs-vswitchd rejected.
	switchErrorRE = regexp.MustCompile(`(?m)^Error (\S+) for: OFPT_(FLOW|GROUP)_MOD [^:]*: *(.*)$`)
)

// newBundleError explains why the bundle text failed, from the command's stderr.
func newBundleError(bridge, text string, err error) error {
	var cmdErr *CommandError
	if !errors.As(err, &cmdErr) {
		return fmt.Errorf("bundle on bridge %s: %w", bridge, err)
	}
	lines := strings.Split(strings.TrimSuffix(text, "\n"), "\n")
	e := &BundleError{Bridge: bridge, Err: err, Reason: firstLine(cmdErr.Stderr)}
	if e.Reason == "" {
		e.Reason = cmdErr.Err.Error()
	}
	if m := parseErrorRE.FindStringSubmatch(cmdErr.Stderr); m != nil {
		n, _ := strconv.Atoi(m[1])
		e.Reason = m[2]
		e.setLine(lines, n)
	} else if m := switchErrorRE.FindStringSubmatch(cmdErr.Stderr); m != nil {
		e.Reason = fmt.Sprintf("ovs-vswitchd rejected it with %s (%s)", m[1], m[3])
		e.setLine(lines, guessLine(lines, strings.ToLower(m[2]), m[3]))
	}
	return e
}

func (e *BundleError) setLine(lines []string, n int) {
	if n >= 1 && n <= len(lines) {
		e.Line, e.Mod = n, lines[n-1]
	}
}

// guessLine finds the bundle line of kind ("flow" or "group") that the
// message ovs-vswitchd decoded in its error (e.g. "ADD priority=23
// actions=group:2") most likely came from: the one sharing the most fields
// with it. It returns 0 if no single line stands out. ovs-ofctl reports only
// the message's xid, whose relation to the line is not documented.
func guessLine(lines []string, kind, decoded string) int {
	fields := strings.FieldsFunc(decoded, isFieldSeparator)
	if len(fields) > 0 {
		fields = fields[1:] // the command: ADD, MOD, DEL...
	}
	best, bestScore, tie := 0, 0, false
	for i, line := range lines {
		if !strings.HasPrefix(line, kind+" ") {
			continue
		}
		score := sharedFields(fields, line)
		switch {
		case score > bestScore:
			best, bestScore, tie = i+1, score, false
		case score == bestScore:
			tie = true
		}
	}
	if tie || bestScore == 0 {
		return 0
	}
	return best
}

// sharedFields counts the fields that also appear in line.
func sharedFields(fields []string, line string) int {
	have := make(map[string]bool)
	for _, f := range strings.FieldsFunc(line, isFieldSeparator) {
		have[f] = true
	}
	n := 0
	for _, f := range fields {
		if have[f] {
			n++
		}
	}
	return n
}

func firstLine(s string) string {
	line, _, _ := strings.Cut(strings.TrimSpace(s), "\n")
	return line
}
