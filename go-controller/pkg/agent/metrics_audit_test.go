package agent

import (
	"context"
	"fmt"
	"io"
	"slices"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/kovs-net/kovs/go-controller/pkg/audit"
	"github.com/kovs-net/kovs/go-controller/pkg/ovs"
)

// switchCounters answers the two commands the audit collector runs at scrape time as
// ovs-ofctl and ovs-appctl print them: the audit meter's stats and ovs-vswitchd's
// rconn_overflow coverage counter. A command whose answer is "" fails.
type switchCounters struct{ meterStats, overflow string }

func (s switchCounters) Run(_ context.Context, c ovs.Command) ([]byte, []byte, error) {
	switch {
	case slices.Contains(c.Args, "meter-stats") && s.meterStats != "":
		return []byte(s.meterStats), nil, nil
	case slices.Contains(c.Args, "coverage/read-counter") && slices.Contains(c.Args, "rconn_overflow") && s.overflow != "":
		return []byte(s.overflow), nil, nil
	}
	return nil, []byte("unanswered"), fmt.Errorf("%s: no answer", c)
}

// TestAuditMetricsCountEveryCopyMissingFromTheLog: the copies the meter dropped and the
// ones ovs-vswitchd dropped on the agent's full monitor connection are both exported, so
// that lines + meter drops + connection drops account for every copy a logged flow made;
// a counter the switch cannot give is left out rather than exported as 0.
func TestAuditMetricsCountEveryCopyMissingFromTheLog(t *testing.T) {
	const meterStats = "OFPST_METER reply (OF1.5) (xid=0x2):\n" +
		"meter:1048576 flow_count:3 packet_in_count:1000 byte_in_count:54000 duration:9.1s bands:\n" +
		"0: packet_count:700 byte_count:37800\n"
	for _, tc := range []struct {
		name    string
		sw      switchCounters
		want    map[string]float64 // metric -> value; absent: not exported
		absent  []string
		samples int
	}{
		{"both counters", switchCounters{meterStats, "238\n"},
			map[string]float64{"kovs_agent_audit_meter_dropped_packets_total": 700, "kovs_agent_audit_connection_dropped_packets_total": 238}, nil, 5},
		{"no connection counter", switchCounters{meterStats, ""},
			map[string]float64{"kovs_agent_audit_meter_dropped_packets_total": 700}, []string{"kovs_agent_audit_connection_dropped_packets_total"}, 4},
		{"a counter that is not a number", switchCounters{meterStats, "ovs-vswitchd: no such counter\n"},
			map[string]float64{"kovs_agent_audit_meter_dropped_packets_total": 700}, []string{"kovs_agent_audit_connection_dropped_packets_total"}, 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			of, err := ovs.NewOpenFlow(ovs.OpenFlowConfig{Bridge: "br-int", Exec: tc.sw})
			if err != nil {
				t.Fatal(err)
			}
			m, reg := newTestMetrics(t)
			l := &auditLog{a: &Agent{of: of}, writer: audit.NewWriter(io.Discard)}
			l.packetIns.Store(62)
			m.auditStarted(l)
			if n, err := testutil.GatherAndCount(reg, "kovs_agent_audit_packet_ins_total", "kovs_agent_audit_lines_total",
				"kovs_agent_audit_unresolved_total", "kovs_agent_audit_meter_dropped_packets_total",
				"kovs_agent_audit_connection_dropped_packets_total"); err != nil || n != tc.samples {
				t.Fatalf("%d audit samples (%v), want %d", n, err, tc.samples)
			}
			families, err := reg.Gather()
			if err != nil {
				t.Fatal(err)
			}
			got := map[string]float64{}
			for _, f := range families {
				for _, mt := range f.GetMetric() {
					got[f.GetName()] = mt.GetCounter().GetValue()
				}
			}
			if got["kovs_agent_audit_packet_ins_total"] != 62 {
				t.Errorf("packet-ins %v, want 62", got["kovs_agent_audit_packet_ins_total"])
			}
			for name, v := range tc.want {
				if g, ok := got[name]; !ok || g != v {
					t.Errorf("%s = %v (exported %v), want %v", name, g, ok, v)
				}
			}
			for _, name := range tc.absent {
				if g, ok := got[name]; ok {
					t.Errorf("%s exported as %v, want it left out", name, g)
				}
			}
		})
	}
}
