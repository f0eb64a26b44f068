package ovs

import (
	"context"
	"fmt"
	"strconv"
	"strings"
)

// CoverageCounter reads one of ovs-vswitchd's coverage counters (`coverage/read-counter
// <name>`): how many times the event it names happened since ovs-vswitchd started.
func (v *Vswitchd) CoverageCounter(ctx context.Context, name string) (uint64, error) {
	out, err := v.run(ctx, "coverage/read-counter", name)
	if err != nil {
		return 0, fmt.Errorf("read coverage counter %s: %w", name, err)
	}
	return ParseCoverageCounter(name, out)
}

// ParseCoverageCounter reads the number `coverage/read-counter <name>` prints.
func ParseCoverageCounter(name, out string) (uint64, error) {
	n, err := strconv.ParseUint(strings.TrimSpace(out), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("coverage counter %s: want a number, ovs-appctl printed %q", name, out)
	}
	return n, nil
}

// PacketInsOverflowed is how many OpenFlow messages ovs-vswitchd dropped, since it started,
// because the connection they were for already had 100 queued (its coverage counter
// rconn_overflow, counted in connmgr's packet-in sending: on a switch no controller
// drives, the packet-ins the monitors of its bridges did not read in time).
func (c *OpenFlow) PacketInsOverflowed(ctx context.Context) (uint64, error) {
	return c.vswitchd.CoverageCounter(ctx, "rconn_overflow")
}
