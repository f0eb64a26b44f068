package metrics

import (
	"context"
	"errors"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/kovs-net/kovs/go-controller/pkg/controller/addresses"
	"github.com/kovs-net/kovs/go-controller/pkg/controller/ipam"
	"github.com/kovs-net/kovs/go-controller/pkg/policy"
)

type fixedUsage addresses.Usage

func (f fixedUsage) Usage() addresses.Usage { return addresses.Usage(f) }

func TestAddressMetricsOnlyWhileAttached(t *testing.T) {
	reg := prometheus.NewRegistry()
	set, err := NewSet(reg)
	if err != nil {
		t.Fatal(err)
	}
	names := []string{"kovs_node_subnets_allocated", "kovs_node_subnets_capacity", "kovs_cluster_pod_addresses_capacity"}
	if n, err := testutil.GatherAndCount(reg, names...); err != nil || n != 0 {
		t.Fatalf("address series on standby: %d (%v)", n, err)
	}
	cidr, _ := ipam.ParseClusterCIDR("10.244.0.0/16", 24)
	set.Addresses.Set(fixedUsage{
		ClusterCIDRs: []addresses.ClusterCIDRUsage{{CIDR: cidr, Family: ipam.IPv4, Nodes: 2, MaxNodes: 256, AddressesPerBlock: 253}},
	})
	want := `
# HELP kovs_node_subnets_capacity Node blocks the cluster CIDR holds at its block size: the node cap the plan implies.
# TYPE kovs_node_subnets_capacity gauge
kovs_node_subnets_capacity{cluster_cidr="10.244.0.0/16",family="ipv4"} 256
# HELP kovs_node_subnets_allocated Nodes holding a block of the cluster CIDR.
# TYPE kovs_node_subnets_allocated gauge
kovs_node_subnets_allocated{cluster_cidr="10.244.0.0/16",family="ipv4"} 2
# HELP kovs_cluster_pod_addresses_capacity Pod addresses the cluster CIDR can give out: node cap times addresses per block.
# TYPE kovs_cluster_pod_addresses_capacity gauge
kovs_cluster_pod_addresses_capacity{cluster_cidr="10.244.0.0/16",family="ipv4"} 64768
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "kovs_node_subnets_capacity",
		"kovs_node_subnets_allocated", "kovs_cluster_pod_addresses_capacity"); err != nil {
		t.Fatal(err)
	}
	set.Addresses.Clear()
	if n, _ := testutil.GatherAndCount(reg, names...); n != 0 {
		t.Fatalf("address series after detaching: %d", n)
	}
}

type nullSource struct{ deltas chan policy.Delta }

func (s nullSource) Watch(context.Context, string) (policy.NodeShare, <-chan policy.Delta, func(), error) {
	return policy.NodeShare{Generation: 10}, s.deltas, func() {}, nil
}

type nullReports struct{ got []uint64 }

func (r *nullReports) Realized(_ string, g uint64) { r.got = append(r.got, g) }

func TestRealizationLatencyFromSendToReport(t *testing.T) {
	reg := prometheus.NewRegistry()
	l, err := NewRealizationLatency(reg)
	if err != nil {
		t.Fatal(err)
	}
	var clock atomic.Int64 // seconds
	clock.Store(100)
	l.now = func() time.Time { return time.Unix(clock.Load(), 0) }
	src := nullSource{deltas: make(chan policy.Delta)}
	reports := &nullReports{}
	_, deltas, cancel, err := l.Source(src).Watch(context.Background(), "n1")
	if err != nil {
		t.Fatal(err)
	}
	defer cancel()
	go func() { src.deltas <- policy.Delta{FromGeneration: 10, Generation: 11} }()
	<-deltas
	time.Sleep(10 * time.Millisecond) // the wrapper records after handing it on
	clock.Add(2)
	r := l.Reports(reports)
	r.Realized("n1", 10)
	if got := testutil.CollectAndCount(l.hist); got != 1 {
		t.Fatalf("series = %d", got)
	}
	if c := sampleCount(t, reg); c != 1 {
		t.Fatalf("samples after realizing 10 = %d, want 1", c)
	}
	r.Realized("n1", 11)
	r.Realized("n1", 11) // a repeated report observes nothing more
	r.Realized("n2", 11) // nothing was sent to n2
	if c := sampleCount(t, reg); c != 2 {
		t.Fatalf("samples after realizing 11 = %d, want 2", c)
	}
	if len(reports.got) != 4 {
		t.Errorf("reports passed on = %v", reports.got)
	}
}

func sampleCount(t *testing.T, g prometheus.Gatherer) uint64 {
	t.Helper()
	families, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() == "kovs_controller_policy_realization_seconds" {
			return f.GetMetric()[0].GetHistogram().GetSampleCount()
		}
	}
	return 0
}

func TestHealthReadyAsLeaderOrStandby(t *testing.T) {
	h := NewHealth()
	steps := []struct {
		do    func()
		ready bool
		why   string
	}{
		{func() {}, false, "starting"},
		{h.Electing, true, "standby"},
		{func() { h.Leading(true) }, false, "leader: informers not synced yet"},
		{h.Synced, true, "leader"},
		{func() { h.Leading(false) }, true, "standby"},
	}
	for i, s := range steps {
		s.do()
		if ok, why := h.Ready(); ok != s.ready || why != s.why {
			t.Errorf("step %d: ready %v (%s), want %v (%s)", i, ok, why, s.ready, s.why)
		}
	}
}

func TestServeHealthAndMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	set, err := NewSet(reg)
	if err != nil {
		t.Fatal(err)
	}
	set.SetLeading(true)
	h := NewHealth()
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	addr := ln.Addr().String()
	ln.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { _ = Serve(ctx, addr, reg, h, nil) }()
	get := func(path string) int {
		for i := 0; i < 50; i++ {
			resp, err := http.Get("http://" + addr + path)
			if err == nil {
				resp.Body.Close()
				return resp.StatusCode
			}
			time.Sleep(20 * time.Millisecond)
		}
		t.Fatalf("%s: no answer", path)
		return 0
	}
	if code := get("/readyz"); code != http.StatusServiceUnavailable {
		t.Errorf("/readyz before leader election = %d", code)
	}
	h.Electing()
	if code := get("/readyz"); code != http.StatusOK {
		t.Errorf("/readyz on standby = %d", code)
	}
	if code := get("/healthz"); code != http.StatusOK {
		t.Errorf("/healthz = %d", code)
	}
	h.SetLive(func(*http.Request) error { return errors.New("lease not renewed") })
	if code := get("/healthz"); code != http.StatusInternalServerError {
		t.Errorf("/healthz with a failing watchdog = %d", code)
	}
	if code := get("/metrics"); code != http.StatusOK {
		t.Errorf("/metrics = %d", code)
	}
	if v := testutil.ToFloat64(set.leader); v != 1 {
		t.Errorf("leader gauge = %v", v)
	}
}
