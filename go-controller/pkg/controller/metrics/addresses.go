package metrics

import (
	"strings"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/kovs-net/kovs/go-controller/pkg/controller/addresses"
)

var (
	nodeSubnetsDesc = prometheus.NewDesc("kovs_node_subnets_allocated",
		"Nodes holding a block of the cluster CIDR.", []string{"cluster_cidr", "family"}, nil)
	nodeSubnetCapacityDesc = prometheus.NewDesc("kovs_node_subnets_capacity",
		"Node blocks the cluster CIDR holds at its block size: the node cap the plan implies.", []string{"cluster_cidr", "family"}, nil)
	clusterAddressCapacityDesc = prometheus.NewDesc("kovs_cluster_pod_addresses_capacity",
		"Pod addresses the cluster CIDR can give out: node cap times addresses per block.", []string{"cluster_cidr", "family"}, nil)
)

// AddressSource is where address usage comes from (*addresses.Allocator).
type AddressSource interface{ Usage() addresses.Usage }

// AddressCollector turns the allocator's usage into metrics at every scrape (how full
// each node's block is, kovs-agent reports: kovs_agent_pod_addresses_*); nothing is
// reported while no allocator is attached (a standby replica).
type AddressCollector struct{ Source *Slot[AddressSource] }

// Describe implements prometheus.Collector.
func (c AddressCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{nodeSubnetsDesc, nodeSubnetCapacityDesc, clusterAddressCapacityDesc} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (c AddressCollector) Collect(ch chan<- prometheus.Metric) {
	src, ok := c.Source.Get()
	if !ok {
		return
	}
	u := src.Usage()
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	for _, c := range u.ClusterCIDRs {
		cidr, family := c.CIDR.CIDR.String(), familyLabel(c.Family.String())
		gauge(nodeSubnetsDesc, float64(c.Nodes), cidr, family)
		gauge(nodeSubnetCapacityDesc, float64(c.MaxNodes), cidr, family)
		gauge(clusterAddressCapacityDesc, float64(c.MaxNodes)*float64(c.AddressesPerBlock), cidr, family)
	}
}

func familyLabel(f string) string { return strings.ToLower(f) }
