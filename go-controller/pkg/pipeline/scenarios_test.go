package pipeline

import (
	"fmt"
	"net"
	"net/netip"
	"strings"
	"testing"

	"github.com/kovs-net/kovs/go-controller/pkg/policy"
)

// scenario is one node's view of a reference cluster.
type scenario struct {
	name  string // golden file name, without .flows
	title string
	node  NodeConfig
	pods  []PodPort
	peers []TunnelPeer
	// policy, when set, is the node's NetworkPolicy share: its flows are compiled too.
	policy *policy.NodeShare
	// services are Service ports by Service, when the scenario has Services.
	services map[string][]ServicePort
	// egress is the node's share of the Egresses, when the scenario has some.
	egress *EgressState
	// audit is what the node logs, when the scenario logs (audit_test.go).
	audit *Audit
}

const (
	tunnelPort  uint32 = 1
	gatewayPort uint32 = 2
	testRound   Round  = 1
)

func mac(s string) net.HardwareAddr {
	m, err := net.ParseMAC(s)
	if err != nil {
		panic(err)
	}
	return m
}

func ip(s string) netip.Addr       { return netip.MustParseAddr(s) }
func cidr(s string) netip.Prefix   { return netip.MustParsePrefix(s) }
func gwMAC(n int) net.HardwareAddr { return mac(fmt.Sprintf("0a:58:0a:f4:%02x:01", n)) }

// oneNodeTwoPods: an IPv4-only node with two pods and no peers.
func oneNodeTwoPods() scenario {
	return scenario{
		name:  "one-node-two-pods",
		title: "one node with two pods (IPv4)",
		node: NodeConfig{
			Name:          "node-1",
			GatewayMAC:    gwMAC(1),
			GatewayIPs:    []netip.Addr{ip("10.244.1.1")},
			PodSubnets:    []netip.Prefix{cidr("10.244.1.0/24")},
			ClusterCIDRs:  []netip.Prefix{cidr("10.244.0.0/16")},
			TunnelOFPort:  tunnelPort,
			GatewayOFPort: gatewayPort,
			UnderlayIPs:   []netip.Addr{ip("172.31.0.1")},
		},
		pods: []PodPort{
			{Namespace: "default", Name: "web", OFPort: 3, MAC: mac("0a:58:0a:f4:01:0a"), IPs: []netip.Addr{ip("10.244.1.10")}},
			{Namespace: "default", Name: "client", OFPort: 4, MAC: mac("0a:58:0a:f4:01:0b"), IPs: []netip.Addr{ip("10.244.1.11")}},
		},
	}
}

// dualStackNode is node n of the three-node dual-stack cluster: pod blocks 10.244.n.0/24
// and fd00:10:244:n::/64, gateway .1 / ::1, underlay 172.31.0.n and fd00:172:31::n.
func dualStackNode(n int) NodeConfig {
	return NodeConfig{
		Name:          fmt.Sprintf("node-%d", n),
		GatewayMAC:    gwMAC(n),
		GatewayIPs:    []netip.Addr{ip(fmt.Sprintf("10.244.%d.1", n)), ip(fmt.Sprintf("fd00:10:244:%d::1", n))},
		PodSubnets:    []netip.Prefix{cidr(fmt.Sprintf("10.244.%d.0/24", n)), cidr(fmt.Sprintf("fd00:10:244:%d::/64", n))},
		ClusterCIDRs:  []netip.Prefix{cidr("10.244.0.0/16"), cidr("fd00:10:244::/48")},
		TunnelOFPort:  tunnelPort,
		GatewayOFPort: gatewayPort,
		UnderlayIPs:   []netip.Addr{ip(fmt.Sprintf("172.31.0.%d", n)), ip(fmt.Sprintf("fd00:172:31::%d", n))},
	}
}

// dualStackPod is pod k (k >= 10) of node n, on ofport k-7.
func dualStackPod(n, k int, name string) PodPort {
	return PodPort{
		Namespace: "default", Name: name, OFPort: uint32(k - 7),
		MAC: mac(fmt.Sprintf("0a:58:0a:f4:%02x:%02x", n, k)),
		IPs: []netip.Addr{ip(fmt.Sprintf("10.244.%d.%d", n, k)), ip(fmt.Sprintf("fd00:10:244:%d::%x", n, k))},
	}
}

// tunnelFamily6 says whether nodes a and b reach each other over the IPv6 underlay: node-3
// does, node-1 and node-2 talk IPv4, so the reference flows show both tun_dst and
// tun_ipv6_dst.
func tunnelFamily6(a, b int) bool { return a == 3 || b == 3 }

func underlayIP(n int, v6 bool) netip.Addr {
	if v6 {
		return ip(fmt.Sprintf("fd00:172:31::%d", n))
	}
	return ip(fmt.Sprintf("172.31.0.%d", n))
}

// threeNodesDualStack is node n's view of the three-node dual-stack cluster.
func threeNodesDualStack(n int) scenario {
	sc := scenario{
		name:  fmt.Sprintf("three-nodes-dual-stack-node-%d", n),
		title: fmt.Sprintf("three nodes, dual-stack: the flows of node-%d", n),
		node:  dualStackNode(n),
		pods:  []PodPort{dualStackPod(n, 10, fmt.Sprintf("web-%d", n))},
	}
	if n == 1 {
		sc.pods = append(sc.pods, dualStackPod(1, 11, "client-1"))
	}
	for m := 1; m <= 3; m++ {
		if m == n {
			continue
		}
		peer := dualStackNode(m)
		sc.peers = append(sc.peers, TunnelPeer{
			NodeName:   peer.Name,
			UnderlayIP: underlayIP(m, tunnelFamily6(n, m)),
			PodSubnets: peer.PodSubnets,
			GatewayMAC: peer.GatewayMAC,
		})
	}
	return sc
}

func goldenScenarios() []scenario {
	return []scenario{oneNodeTwoPods(), threeNodesDualStack(1), policyScenario(), egressScenario(), clusterScenario(), auditScenario()}
}

func (sc scenario) flows(t *testing.T) []Flow {
	t.Helper()
	return sc.compile(t, Stages()).Flows
}

// snapshot is the scenario's node as the agent hands it to the stages.
func (sc scenario) snapshot() Snapshot {
	return Snapshot{Node: sc.node, Round: testRound, Pods: sc.pods, Peers: sc.peers, Policy: sc.policy, Services: sc.services,
		Egress: sc.egress, Audit: sc.audit}
}

// compile compiles the scenario through every stage of r: the one way flows are built.
func (sc scenario) compile(t *testing.T, r Registry) Compiled {
	t.Helper()
	c, err := r.Compile(sc.snapshot())
	if err != nil {
		t.Fatalf("compile %s: %v", sc.name, err)
	}
	if len(c.Conflicts) > 0 {
		t.Fatalf("compile %s: objects disagree on flows:\n%s", sc.name, strings.Join(c.Conflicts, "\n"))
	}
	return c
}

func (sc scenario) tracer(t *testing.T) *Tracer {
	t.Helper()
	return NewTracer(sc.flows(t))
}
