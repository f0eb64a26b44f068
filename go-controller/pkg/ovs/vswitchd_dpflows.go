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

// DeleteDatapathFlows deletes datapath flows by their UFIDs (dpctl/del-flow), all over
// one connection to ovs-vswitchd's unixctl socket, found again for this call (Ctl): one
// ovs-appctl process per flow cost milliseconds each. A flow already gone (expired, or
// deleted by a revalidator meanwhile) is no error; any other failure is, and names the
// first flow that failed. The revalidators drop a deleted flow's bookkeeping at their next
// sweep; until then its packets are forwarded by upcall, translated against the current
// tables.
func (v *Vswitchd) DeleteDatapathFlows(ctx context.Context, ufids []string) error {
	if len(ufids) == 0 {
		return nil
	}
	params := make([][]string, len(ufids))
	for i, ufid := range ufids {
		if !strings.HasPrefix(ufid, "ufid:") {
			return fmt.Errorf("delete datapath flow: %q is no UFID (want ufid:<32 hex digits>)", ufid)
		}
		params[i] = []string{ufid}
	}
	ctl, err := DialUnixctl(ctx, v.Ctl(), v.rundir)
	if err != nil {
		return fmt.Errorf("delete %d datapath flows: %w", len(ufids), err)
	}
	defer ctl.Close()
	errs, err := ctl.CallEach(ctx, "dpctl/del-flow", params)
	if err != nil {
		return fmt.Errorf("delete %d datapath flows: %w", len(ufids), err)
	}
	for i, err := range errs {
		// What ovs-vswitchd answers for a UFID its datapath does not hold.
		if err != nil && !strings.Contains(err.Error(), "deleting flow (No such file or directory)") {
			return fmt.Errorf("delete datapath flow %s: %w", ufids[i], err)
		}
	}
	return nil
}
