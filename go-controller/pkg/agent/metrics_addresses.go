package agent

import (
	"strings"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/kovs-net/kovs/go-controller/pkg/agent/podaddr"
)

var (
	podAddressesDesc = prometheus.NewDesc("kovs_agent_pod_addresses_allocated",
		"Pod addresses held in the node's block.", []string{"family", "block"}, nil)
	podAddressCapacityDesc = prometheus.NewDesc("kovs_agent_pod_addresses_capacity",
		"Pod addresses the node's block has (network, gateway and IPv4 broadcast excluded).", []string{"family", "block"}, nil)
)

// addressCollector reports how full the node's blocks are, from the agent's allocator,
// at every scrape (nothing before the allocator is open).
type addressCollector struct{ book atomic.Pointer[podaddr.Book] }

func (c *addressCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- podAddressesDesc
	ch <- podAddressCapacityDesc
}

func (c *addressCollector) Collect(ch chan<- prometheus.Metric) {
	book := c.book.Load()
	if book == nil {
		return
	}
	for _, pool := range book.Pools() {
		family, block := strings.ToLower(pool.Family().String()), pool.Block().String()
		ch <- prometheus.MustNewConstMetric(podAddressesDesc, prometheus.GaugeValue, float64(pool.InUse()), family, block)
		ch <- prometheus.MustNewConstMetric(podAddressCapacityDesc, prometheus.GaugeValue, float64(pool.Usable()), family, block)
	}
}

// addressBookOpened starts reporting book's usage.
func (m *Metrics) addressBookOpened(book *podaddr.Book) {
	if m != nil {
		m.addresses.book.Store(book)
	}
}
