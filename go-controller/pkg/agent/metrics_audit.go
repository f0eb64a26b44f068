package agent

import (
	"context"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/kovs-net/kovs/go-controller/pkg/pipeline"
)

// auditCollector exports the audit log's counts (docs/audit.md): the packet-ins the agent
// received, the lines written, what the audit meter dropped and what ovs-vswitchd dropped
// on the agent's full monitor connection (both read from the switch at scrape time),
// which is missing from the log and never from the network.
type auditCollector struct {
	mu  sync.Mutex
	log *auditLog
}

var (
	auditPacketInsDesc = prometheus.NewDesc("kovs_agent_audit_packet_ins_total",
		"Copies of logged packets the agent received from br-int.", nil, nil)
	auditLinesDesc = prometheus.NewDesc("kovs_agent_audit_lines_total",
		"Lines written to the policy audit log (a line of collapsed denies counts once).", nil, nil)
	auditUnresolvedDesc = prometheus.NewDesc("kovs_agent_audit_unresolved_total",
		"Copies whose flow named no rule the agent knows (the share changed in between); not logged.", nil, nil)
	auditDroppedDesc = prometheus.NewDesc("kovs_agent_audit_meter_dropped_packets_total",
		"Copies the audit meter dropped over its rate: decisions missing from the log (the packets themselves were not dropped).", nil, nil)
	auditOverflowDesc = prometheus.NewDesc("kovs_agent_audit_connection_dropped_packets_total",
		"Copies the audit meter passed that ovs-vswitchd dropped because the agent's monitor connection had 100 queued (its coverage counter rconn_overflow): decisions missing from the log (the packets themselves were not dropped).", nil, nil)
)

func (c *auditCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{auditPacketInsDesc, auditLinesDesc, auditUnresolvedDesc, auditDroppedDesc, auditOverflowDesc} {
		ch <- d
	}
}

func (c *auditCollector) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	l := c.log
	c.mu.Unlock()
	if l == nil {
		return
	}
	ch <- prometheus.MustNewConstMetric(auditPacketInsDesc, prometheus.CounterValue, float64(l.packetIns.Load()))
	ch <- prometheus.MustNewConstMetric(auditLinesDesc, prometheus.CounterValue, float64(l.writer.Lines()))
	ch <- prometheus.MustNewConstMetric(auditUnresolvedDesc, prometheus.CounterValue, float64(l.unresolved.Load()))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if dropped, err := l.a.of.MeterDropped(ctx, pipeline.AuditMeterID); err == nil {
		ch <- prometheus.MustNewConstMetric(auditDroppedDesc, prometheus.CounterValue, float64(dropped))
	}
	if overflowed, err := l.a.of.PacketInsOverflowed(ctx); err == nil {
		ch <- prometheus.MustNewConstMetric(auditOverflowDesc, prometheus.CounterValue, float64(overflowed))
	}
}

func (m *Metrics) auditStarted(l *auditLog) {
	if m == nil {
		return
	}
	m.audit.mu.Lock()
	m.audit.log = l
	m.audit.mu.Unlock()
}
