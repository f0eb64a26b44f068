package ovs

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// Meter is an OpenFlow meter with one drop band: packets beyond RateKbps (kbit/s), with
// bursts of up to BurstKbits (kbit), are dropped. Both datapaths implement meters (the
// userspace one in ovs-vswitchd, the kernel one since Linux 4.15).
type Meter struct {
	ID         uint32
	RateKbps   uint32
	BurstKbits uint32
	// Packets: the meter counts packets, not bits; RateKbps is then packets a second and
	// BurstKbits packets (ovs-ofctl's pktps).
	Packets bool
}

func (m Meter) String() string {
	unit := "kbps"
	if m.Packets {
		unit = "pktps"
	}
	return fmt.Sprintf("meter=%d,%s,burst,band=type=drop,rate=%d,burst_size=%d", m.ID, unit, m.RateKbps, m.BurstKbits)
}

// MeterClient keeps the meters of one bridge. *OpenFlow implements it, and so does
// *ovsfake.OpenFlow.
type MeterClient interface {
	// SetMeter adds the meter, or modifies the one with its ID.
	SetMeter(ctx context.Context, m Meter) error
	// DeleteMeter deletes a meter; a missing one is success.
	DeleteMeter(ctx context.Context, id uint32) error
	// DumpMeters lists the meters.
	DumpMeters(ctx context.Context) ([]Meter, error)
}

var _ MeterClient = (*OpenFlow)(nil)

// SetMeter adds the meter, or modifies the existing one with its ID (ovs-ofctl add-meter
// refuses an existing ID; mod-meter a missing one).
func (c *OpenFlow) SetMeter(ctx context.Context, m Meter) error {
	if m.ID == 0 || m.RateKbps == 0 || m.BurstKbits == 0 {
		return fmt.Errorf("set meter on bridge %s: %s: ID, rate and burst must be positive", c.bridge, m)
	}
	have, err := c.DumpMeters(ctx)
	if err != nil {
		return err
	}
	verb := "add-meter"
	for _, h := range have {
		if h.ID == m.ID {
			if h == m {
				return nil
			}
			verb = "mod-meter"
		}
	}
	if _, err := c.run(ctx, nil, verb, c.target, m.String()); err != nil {
		return fmt.Errorf("%s %s on bridge %s: %w", verb, m, c.bridge, err)
	}
	return nil
}

// DeleteMeter deletes meter id (ovs-ofctl del-meter succeeds for a missing one).
func (c *OpenFlow) DeleteMeter(ctx context.Context, id uint32) error {
	if id == 0 {
		return fmt.Errorf("delete meter on bridge %s: meter 0 would delete every meter", c.bridge)
	}
	if _, err := c.run(ctx, nil, "del-meter", c.target, "meter="+strconv.FormatUint(uint64(id), 10)); err != nil {
		return fmt.Errorf("delete meter %d on bridge %s: %w", id, c.bridge, err)
	}
	return nil
}

// DumpMeters lists the bridge's meters (ovs-ofctl dump-meters).
func (c *OpenFlow) DumpMeters(ctx context.Context) ([]Meter, error) {
	out, err := c.run(ctx, nil, "dump-meters", c.target)
	if err != nil {
		return nil, fmt.Errorf("dump meters of bridge %s: %w", c.bridge, err)
	}
	meters, err := ParseMeterDump(out)
	if err != nil {
		return nil, fmt.Errorf("dump meters of bridge %s: %w", c.bridge, err)
	}
	return meters, nil
}

// ParseMeterDump reads ovs-ofctl dump-meters output: a "meter=N kbps burst bands=" line
// per meter, then one "type=drop rate=R burst_size=B" line per band. A meter of another
// shape (pktps, several bands) is listed with what its first band says.
func ParseMeterDump(out string) ([]Meter, error) {
	var meters []Meter
	for _, line := range strings.Split(out, "\n") {
		line = strings.TrimSpace(line)
		switch {
		case line == "" || isReplyHeader(line):
		case strings.HasPrefix(line, "meter="):
			id, err := strconv.ParseUint(strings.Fields(line)[0][len("meter="):], 10, 32)
			if err != nil {
				return nil, fmt.Errorf("meter line %q: %w", line, err)
			}
			meters = append(meters, Meter{ID: uint32(id), Packets: slices.Contains(strings.Fields(line), "pktps")})
		case strings.HasPrefix(line, "type=") && len(meters) > 0:
			m := &meters[len(meters)-1]
			if m.RateKbps != 0 {
				continue
			}
			for _, f := range strings.Fields(line) {
				k, v, _ := strings.Cut(f, "=")
				n, err := strconv.ParseUint(v, 10, 32)
				if (k == "rate" || k == "burst_size") && err != nil {
					return nil, fmt.Errorf("band line %q: %w", line, err)
				}
				switch k {
				case "rate":
					m.RateKbps = uint32(n)
				case "burst_size":
					m.BurstKbits = uint32(n)
				}
			}
		default:
			return nil, fmt.Errorf("unexpected line in a meter dump: %q", line)
		}
	}
	return meters, nil
}

// MeterDropped is how many packets meter id's bands have dropped (ovs-ofctl meter-stats:
// the sum of the bands' packet_count).
func (c *OpenFlow) MeterDropped(ctx context.Context, id uint32) (uint64, error) {
	out, err := c.run(ctx, nil, "meter-stats", c.target, "meter="+strconv.FormatUint(uint64(id), 10))
	if err != nil {
		return 0, fmt.Errorf("meter stats of meter %d on bridge %s: %w", id, c.bridge, err)
	}
	return ParseMeterDropped(out)
}

// ParseMeterDropped sums the bands' packet_count in ovs-ofctl meter-stats output for one
// meter: "meter:N flow_count:... bands:" then "0: packet_count:P byte_count:B" per band.
func ParseMeterDropped(out string) (uint64, error) {
	var total uint64
	for _, line := range strings.Split(out, "\n") {
		fields := strings.Fields(line)
		if len(fields) < 2 || !strings.HasSuffix(fields[0], ":") || strings.HasPrefix(fields[0], "meter") {
			continue
		}
		v, ok := strings.CutPrefix(fields[1], "packet_count:")
		if !ok {
			continue
		}
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("meter band line %q: %w", line, err)
		}
		total += n
	}
	return total, nil
}
