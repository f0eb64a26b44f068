package ovsfake

import (
	"context"
	"fmt"
	"slices"

	"github.com/kovs-net/kovs/go-controller/pkg/ovs"
)

// SetMeter implements MeterClient.
func (f *OpenFlow) SetMeter(_ context.Context, m ovs.Meter) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if m.ID == 0 || m.RateKbps == 0 || m.BurstKbits == 0 {
		return fmt.Errorf("set meter %s: ID, rate and burst must be positive", m)
	}
	if f.meters == nil {
		f.meters = map[uint32]ovs.Meter{}
	}
	f.meters[m.ID] = m
	return nil
}

// DeleteMeter implements MeterClient.
func (f *OpenFlow) DeleteMeter(_ context.Context, id uint32) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.meters, id)
	return nil
}

// DumpMeters implements MeterClient, sorted by ID.
func (f *OpenFlow) DumpMeters(context.Context) ([]ovs.Meter, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make([]ovs.Meter, 0, len(f.meters))
	for _, m := range f.meters {
		out = append(out, m)
	}
	slices.SortFunc(out, func(a, b ovs.Meter) int { return int(a.ID) - int(b.ID) })
	return out, nil
}

var _ ovs.MeterClient = (*OpenFlow)(nil)
