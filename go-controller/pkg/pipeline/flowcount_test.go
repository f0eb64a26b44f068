package pipeline

import (
	"fmt"
	"net"
	"net/netip"
	"testing"
)

// How many flows a node holds, as a function of its local pods and of the other nodes of
// the cluster (its tunnel peers). Nodes of these tests have room for 1,000 pods and 1,000
// peers: /20 IPv4 blocks in 10.0.0.0/8 and /64 IPv6 blocks in fd00:10::/48.

// flowFamilies are the address families of a flow-count case.
type flowFamilies struct {
	name     string
	ipv4     bool
	ipv6     bool
	underlay string // the node's underlay address
}

var (
	familyIPv4 = flowFamilies{name: "ipv4", ipv4: true, underlay: "172.31.0.1"}
	familyIPv6 = flowFamilies{name: "ipv6", ipv6: true, underlay: "fd00:172:31::1"}
	familyDual = flowFamilies{name: "dual", ipv4: true, ipv6: true, underlay: "172.31.0.1"}
)

// block is node k's pod block of one family (k = 0 is the local node).
func block(k int, ipv6 bool) netip.Prefix {
	if ipv6 {
		return cidr(fmt.Sprintf("fd00:10:0:%x::/64", k))
	}
	return cidr(fmt.Sprintf("10.%d.%d.0/20", k>>4, (k&15)<<4))
}

func (f flowFamilies) blocks(k int) []netip.Prefix {
	var out []netip.Prefix
	if f.ipv4 {
		out = append(out, block(k, false))
	}
	if f.ipv6 {
		out = append(out, block(k, true))
	}
	return out
}

// nthHost is the n-th address of a block (n = 1 is the gateway).
func nthHost(p netip.Prefix, n int) netip.Addr {
	a := p.Addr()
	for range n {
		a = a.Next()
	}
	return a
}

func indexMAC(prefix byte, n int) net.HardwareAddr {
	return net.HardwareAddr{0x0a, 0x58, prefix, byte(n >> 16), byte(n >> 8), byte(n)}
}

func (f flowFamilies) node() NodeConfig {
	n := NodeConfig{
		Name:          "node-0",
		GatewayMAC:    indexMAC(0, 0),
		PodSubnets:    f.blocks(0),
		ClusterCIDRs:  []netip.Prefix{cidr("10.0.0.0/8"), cidr("fd00:10::/48")},
		TunnelOFPort:  tunnelPort,
		GatewayOFPort: gatewayPort,
		UnderlayIPs:   []netip.Addr{ip(f.underlay)},
	}
	for _, b := range n.PodSubnets {
		n.GatewayIPs = append(n.GatewayIPs, nthHost(b, 1))
	}
	return n
}

// pods are n local pods on ofports 3, 4, ... with one address per family.
func (f flowFamilies) pods(n int) []PodPort {
	pods := make([]PodPort, n)
	for i := range pods {
		pods[i] = PodPort{Namespace: "default", Name: fmt.Sprintf("pod-%d", i), OFPort: uint32(i + 3), MAC: indexMAC(1, i)}
		for _, b := range f.blocks(0) {
			pods[i].IPs = append(pods[i].IPs, nthHost(b, i+2))
		}
	}
	return pods
}

// peers are the n other nodes of the cluster, each with a block per family.
func (f flowFamilies) peers(n int) []TunnelPeer {
	peers := make([]TunnelPeer, n)
	for i := range peers {
		k := i + 1
		peers[i] = TunnelPeer{NodeName: fmt.Sprintf("node-%d", k), PodSubnets: f.blocks(k), GatewayMAC: indexMAC(2, k),
			UnderlayIP: nthHost(netip.PrefixFrom(ip(f.underlay), 16).Masked(), k+1)}
	}
	return peers
}

func (f flowFamilies) countFlows(tb testing.TB, pods, peers int) int {
	tb.Helper()
	b, err := NewBuilder(f.node(), testRound)
	if err != nil {
		tb.Fatal(err)
	}
	flows, err := b.NodeFlows(f.pods(pods), f.peers(peers))
	if err != nil {
		tb.Fatalf("%s, %d pods, %d peers: %v", f.name, pods, peers, err)
	}
	return len(flows)
}

// TestFlowCountIsLinear: a node's flows are base + perPod*pods + perPeer*peers. Every pod
// and every peer brings a fixed number of flows and nothing grows with their product (no
// flow per pair of pods, or per pod and peer). The constants come from the smallest
// cases; larger ones must follow them.
func TestFlowCountIsLinear(t *testing.T) {
	for _, f := range []flowFamilies{familyIPv4, familyIPv6, familyDual} {
		t.Run(f.name, func(t *testing.T) {
			base := f.countFlows(t, 0, 0)
			perPod := f.countFlows(t, 1, 0) - base
			perPeer := f.countFlows(t, 0, 1) - base
			t.Logf("flows = %d + %d*pods + %d*peers", base, perPod, perPeer)
			if perPod <= 0 || perPeer <= 0 {
				t.Fatalf("a pod adds %d flows and a peer %d: both must add some", perPod, perPeer)
			}
			for _, pods := range []int{0, 1, 2, 17, 250} {
				for _, peers := range []int{0, 1, 3, 40} {
					want := base + perPod*pods + perPeer*peers
					if got := f.countFlows(t, pods, peers); got != want {
						t.Errorf("%d pods, %d peers: %d flows, want %d + %d*%d + %d*%d = %d",
							pods, peers, got, base, perPod, pods, perPeer, peers, want)
					}
				}
			}
		})
	}
}

// BenchmarkNodeFlows compiles every flow of a node with 0 to 1,000 local pods and 1 to
// 1,000 tunnel peers (clusters of 2 to 1,001 nodes), IPv4 and dual-stack, and reports how
// many flows that is (flows) next to the time it takes (ns/op): what the agent's flow
// syncer computes on every sync.
func BenchmarkNodeFlows(b *testing.B) {
	for _, f := range []flowFamilies{familyIPv4, familyDual} {
		for _, pods := range []int{0, 10, 100, 1000} {
			for _, peers := range []int{1, 10, 100, 1000} {
				b.Run(fmt.Sprintf("%s/pods=%d/peers=%d", f.name, pods, peers), func(b *testing.B) {
					builder, err := NewBuilder(f.node(), testRound)
					if err != nil {
						b.Fatal(err)
					}
					podPorts, tunnelPeers := f.pods(pods), f.peers(peers)
					var n int
					for b.Loop() {
						flows, err := builder.NodeFlows(podPorts, tunnelPeers)
						if err != nil {
							b.Fatal(err)
						}
						n = len(flows)
					}
					b.ReportMetric(float64(n), "flows")
				})
			}
		}
	}
}
