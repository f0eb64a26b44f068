package ovs

import (
	"context"
	"fmt"
	"strings"
)

// DatapathFlow is one cached flow of ovs-vswitchd's datapath, as `dpctl/dump-flows -m`
// prints it.
type DatapathFlow struct {
	// UFID is the flow's unique identifier ("ufid:" and 32 hex digits with dashes), by
	// which it is deleted.
	UFID string
	// Key is the flow's match: its fields with their masks (a field the megaflow
	// wildcards entirely is left out or printed with a zero mask).
	Key string
	// Actions is the flow's datapath actions.
	Actions string
}

// ParseDatapathFlows parses the output of `dpctl/dump-flows -m`; a line that is not a
// flow with a UFID, a key and actions is an error that quotes it. The userspace datapath
// dumps each thread's flows under a heading ("flow-dump from the main thread:", "flow-dump
// from pmd on cpu core: N"); a flow two threads hold is listed once.
func ParseDatapathFlows(out string) ([]DatapathFlow, error) {
	var flows []DatapathFlow
	seen := map[string]bool{}
	for _, line := range strings.Split(out, "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "flow-dump from ") {
			continue
		}
		ufid, rest, ok := strings.Cut(line, ", ")
		if !ok || !strings.HasPrefix(ufid, "ufid:") {
			return nil, fmt.Errorf("datapath flow without a UFID (dpctl/dump-flows -m): %q", line)
		}
		key, _, ok := strings.Cut(rest, ", packets:")
		_, actions, aok := strings.Cut(rest, " actions:")
		if !ok || !aok {
			return nil, fmt.Errorf("datapath flow without packets or actions (dpctl/dump-flows -m): %q", line)
		}
		if !seen[ufid] {
			seen[ufid] = true
			flows = append(flows, DatapathFlow{UFID: ufid, Key: key, Actions: actions})
		}
	}
	return flows, nil
}

// DumpDatapathFlows lists the flows of ovs-vswitchd's datapath (dpctl/dump-flows -m).
func (v *Vswitchd) DumpDatapathFlows(ctx context.Context) ([]DatapathFlow, error) {
	out, err := v.run(ctx, "dpctl/dump-flows", "-m")
	if err != nil {
		return nil, fmt.Errorf("dump datapath flows: %w", err)
	}
	return ParseDatapathFlows(out)
}

// DeleteDatapathFlow deletes one datapath flow by its UFID (dpctl/del-flow). A flow
// already gone (expired, or deleted by a revalidator meanwhile) is no error. The
// revalidators drop the flow's bookkeeping at their next sweep; until then the flow's
// packets are forwarded by upcall, translated against the current tables.
func (v *Vswitchd) DeleteDatapathFlow(ctx context.Context, ufid string) error {
	if !strings.HasPrefix(ufid, "ufid:") {
		return fmt.Errorf("delete datapath flow: %q is no UFID (want ufid:<32 hex digits>)", ufid)
	}
	if _, err := v.run(ctx, "dpctl/del-flow", ufid); err != nil {
		// What ovs-vswitchd answers for a UFID its datapath does not hold; an unreachable
		// ovs-vswitchd says "No such file or directory" too, of its socket, and is an error.
		if strings.Contains(err.Error(), "deleting flow (No such file or directory)") {
			return nil
		}
		return fmt.Errorf("delete datapath flow %s: %w", ufid, err)
	}
	return nil
}
