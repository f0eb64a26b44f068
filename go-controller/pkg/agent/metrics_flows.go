package agent

import (
	"strconv"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/kovs-net/kovs/go-controller/pkg/pipeline"
)

var (
	flowsDesc = prometheus.NewDesc("kovs_agent_flows",
		"Flows the agent installed on br-int, by table name.", []string{"table"}, nil)
	podPortsDesc = prometheus.NewDesc("kovs_agent_pod_ports",
		"Pod ports on br-int the agent programs.", nil, nil)
	peersDesc = prometheus.NewDesc("kovs_agent_tunnel_peers",
		"Nodes this node has a Geneve tunnel route to.", nil, nil)
	rejectedPeersDesc = prometheus.NewDesc("kovs_agent_tunnel_peers_rejected",
		"Nodes whose records are unusable for this node: no routes to them (the agent's log and /status say why).", nil, nil)
)

// stateCollector reports the node's flows, pods and peers at every scrape, once the agent
// has them.
type stateCollector struct{ health atomic.Pointer[agentHealth] }

func (c *stateCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- flowsDesc
	ch <- podPortsDesc
	ch <- peersDesc
	ch <- rejectedPeersDesc
}

func (c *stateCollector) Collect(ch chan<- prometheus.Metric) {
	h := c.health.Load()
	if h == nil {
		return
	}
	if syncer := h.syncer.Load(); syncer != nil {
		for table, n := range syncer.installedPerTable() {
			ch <- prometheus.MustNewConstMetric(flowsDesc, prometheus.GaugeValue, float64(n), table)
		}
	}
	if state := h.state.Load(); state != nil {
		ch <- prometheus.MustNewConstMetric(podPortsDesc, prometheus.GaugeValue, float64(len(state.Pods())))
		ch <- prometheus.MustNewConstMetric(peersDesc, prometheus.GaugeValue, float64(len(state.Peers())))
		ch <- prometheus.MustNewConstMetric(rejectedPeersDesc, prometheus.GaugeValue, float64(len(state.RejectedPeers())))
	}
}

// watch makes the collector report the agent's state.
func (m *Metrics) watch(h *agentHealth) {
	if m != nil {
		m.state.health.Store(h)
	}
}

// installedPerTable counts the flows this syncer installed, by table name (a table
// number without a name in the pipeline is reported as its number).
func (s *FlowSyncer) installedPerTable() map[string]int {
	s.mu.Lock()
	installed := s.installed // record replaces the map, never changes it
	s.mu.Unlock()
	out := map[string]int{}
	for key := range installed {
		out[tableName(key.Table)]++
	}
	return out
}

func tableName(id uint8) string {
	if t, ok := pipeline.TableByID(id); ok {
		return t.Name
	}
	return strconv.Itoa(int(id))
}
