package sandbox

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"syscall"
)

// IPFamily selects the address families of the underlay, the services and the pods.
type IPFamily string

const (
	IPv4      IPFamily = "ipv4"
	IPv6      IPFamily = "ipv6"
	DualStack IPFamily = "dual"
)

// ParseIPFamily accepts ipv4, ipv6 or dual.
func ParseIPFamily(s string) (IPFamily, error) {
	switch f := IPFamily(s); f {
	case IPv4, IPv6, DualStack:
		return f, nil
	}
	return "", fmt.Errorf("ip family %q: use ipv4, ipv6 or dual", s)
}

// HasIPv4 reports whether the family includes IPv4.
func (f IPFamily) HasIPv4() bool { return f != IPv6 }

// HasIPv6 reports whether the family includes IPv6.
func (f IPFamily) HasIPv6() bool { return f != IPv4 }

// Underlay and service address plans. The underlay lives only inside the sandbox's own
// namespaces, so every sandbox can use the same ranges.
var (
	underlayV4    = netip.MustParsePrefix("172.30.0.0/24")
	underlayV6    = netip.MustParsePrefix("fd00:172:30::/64")
	serviceCIDRv4 = "10.96.0.0/16"
	serviceCIDRv6 = "fd00:10:96::/112"
)

// Node is one emulated node as Up created it.
type Node struct {
	Name string `json:"name"`
	// IPs are the node's underlay addresses (on its br-ex), primary family first.
	IPs []string `json:"ips"`
	// MAC of br-ex, fixed so tunnel neighbours can be seeded.
	MAC string `json:"mac"`
	// Zone is the node's topology.kubernetes.io/zone label ("" in states saved before
	// nodes had zones: no label).
	Zone string `json:"zone,omitempty"`
}

// State is what Up decided, saved in the state directory for the other commands.
type State struct {
	Name          string   `json:"name"`
	Family        IPFamily `json:"ipFamily"`
	EtcdPort      int      `json:"etcdPort"`
	EtcdPeerPort  int      `json:"etcdPeerPort"`
	APIServerPort int      `json:"apiServerPort"`
	// ControllerPort is where kovs-controller serves the policy stream (root namespace
	// loopback); nodes reach it on NodeControllerPort.
	ControllerPort int `json:"controllerPort,omitempty"`
	// MetricsPort is where kovs-controller serves /metrics (root namespace loopback).
	MetricsPort int `json:"metricsPort,omitempty"`
	// ReplicaMetricsPorts are the metrics ports of kovs-controller's further replicas
	// (Options.ControllerReplicas), the second's first; see ControllerReplicas.
	ReplicaMetricsPorts []int    `json:"replicaMetricsPorts,omitempty"`
	ServiceCIDRs        []string `json:"serviceCIDRs"`
	Nodes               []Node   `json:"nodes"`
	// KovsBinDir is where kovs binaries were taken from ("" if kovs was not started).
	KovsBinDir string `json:"kovsBinDir,omitempty"`
	// AgentMetricsPort is where every node's kovs-agent serves /metrics, /healthz,
	// /readyz and /status: on the loopback of the node's own namespace.
	AgentMetricsPort int `json:"agentMetricsPort,omitempty"`
	// KubeProxy: every node runs kube-proxy and its kovs-agent leaves Services to it.
	KubeProxy bool `json:"kubeProxy,omitempty"`
	// Runtime runs the nodes' pods (RuntimeEmulator or RuntimeContainerd).
	Runtime Runtime `json:"runtime,omitempty"`
	// NodePodCIDRs: kube-controller-manager allocates spec.podCIDRs, kovs-controller
	// takes its node blocks from them.
	NodePodCIDRs bool `json:"nodePodCIDRs,omitempty"`
	// ClusterCIDRs are the pod address plan kovs runs with.
	ClusterCIDRs []string `json:"clusterCIDRs,omitempty"`
}

// APIServerURL is the kube-apiserver address in the root namespace.
func (s *State) APIServerURL() string {
	return "https://" + net.JoinHostPort("127.0.0.1", strconv.Itoa(s.APIServerPort))
}

// Node returns the node with the given name.
func (s *State) Node(name string) (Node, bool) {
	for _, n := range s.Nodes {
		if n.Name == name {
			return n, true
		}
	}
	return Node{}, false
}

func planNodes(l Layout, count int, family IPFamily) []Node {
	nodes := make([]Node, count)
	for i := range nodes {
		idx := i + 1
		n := Node{Name: l.NodeName(idx), MAC: fmt.Sprintf("02:30:00:00:%02x:%02x", idx>>8, idx&0xff), Zone: NodeZone(idx)}
		if family.HasIPv4() {
			n.IPs = append(n.IPs, nthAddr(underlayV4, idx).String())
		}
		if family.HasIPv6() {
			n.IPs = append(n.IPs, nthAddr(underlayV6, idx).String())
		}
		nodes[i] = n
	}
	return nodes
}

// NodeZones are the zones the sandbox spreads its nodes over, in turn: node 1 in
// zone-a, node 2 in zone-b, node 3 in zone-c, node 4 in zone-a again. Three, because the
// upstream Traffic Distribution tests want nodes in at least three zones.
var NodeZones = []string{"zone-a", "zone-b", "zone-c"}

// NodeZone is the zone of the idx-th node (1-based).
func NodeZone(idx int) string { return NodeZones[(idx-1)%len(NodeZones)] }

// nthAddr returns the n-th address of a prefix (n small).
func nthAddr(p netip.Prefix, n int) netip.Addr {
	b := p.Addr().AsSlice()
	for i := len(b) - 1; i >= 0 && n > 0; i-- {
		sum := int(b[i]) + n
		b[i] = byte(sum)
		n = sum >> 8
	}
	a, _ := netip.AddrFromSlice(b)
	return a
}

func serviceCIDRs(f IPFamily) []string {
	switch f {
	case IPv4:
		return []string{serviceCIDRv4}
	case IPv6:
		return []string{serviceCIDRv6}
	}
	return []string{serviceCIDRv4, serviceCIDRv6}
}

func (l Layout) saveState(s *State) error {
	b, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(l.StateFile(), b, 0o600)
}

// LoadState reads what Up saved.
func (l Layout) LoadState() (*State, error) {
	b, err := os.ReadFile(l.StateFile())
	if err != nil {
		if os.IsNotExist(err) {
			return nil, fmt.Errorf("sandbox %q is not up (no %s): run `kovs-sandbox up --name %s`", l.Name, l.StateFile(), l.Name)
		}
		return nil, err
	}
	var s State
	if err := json.Unmarshal(b, &s); err != nil {
		return nil, fmt.Errorf("parse %s: %w", l.StateFile(), err)
	}
	return &s, nil
}

// loopbackPorts are the root namespace's loopback ports the sandbox's listeners use.
func (s *State) loopbackPorts() []int {
	return append([]int{s.EtcdPort, s.EtcdPeerPort, s.APIServerPort, s.ControllerPort, s.MetricsPort}, s.ReplicaMetricsPorts...)
}

// otherSandboxPorts are the loopback ports in the saved state of every sandbox under l's
// root but l's own (a sandbox whose state cannot be read holds none).
func otherSandboxPorts(l Layout) (map[int]bool, error) {
	taken := map[int]bool{}
	entries, err := os.ReadDir(l.Root)
	if err != nil {
		return nil, err
	}
	for _, e := range entries {
		if !e.IsDir() || e.Name() == l.Name {
			continue
		}
		other, err := NewLayout(e.Name(), l.Root)
		if err != nil {
			continue // not a sandbox's directory
		}
		st, err := other.LoadState()
		if err != nil {
			continue
		}
		for _, p := range st.loopbackPorts() {
			taken[p] = true
		}
	}
	return taken, nil
}

// lockFile takes an exclusive lock of path (created if missing) and returns its release.
func lockFile(path string) (unlock func(), err error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		f.Close()
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	return func() {
		_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
		f.Close()
	}, nil
}

// freePort picks a free loopback TCP port for one of the sandbox's listeners, none of
// taken, and adds it to taken. It picks below the kernel's ephemeral range: a port the
// kernel hands out for listening on :0 comes from that range, and by the time the
// sandbox's process binds it some outgoing connection may use it as its source port
// (kovs-controller was seen to die with "address already in use").
func freePort(taken map[int]bool) (int, error) {
	first, n := portsBelowEphemeral()
	for range 200 {
		port := first + rand.IntN(n)
		if taken[port] {
			continue
		}
		ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
		if err != nil {
			continue
		}
		ln.Close()
		taken[port] = true
		return port, nil
	}
	return 0, fmt.Errorf("no free loopback port in %d-%d after 200 tries", first, first+n-1)
}

// portsBelowEphemeral is the range freePort picks from: up to 12,000 ports just below
// net.ipv4.ip_local_port_range (32768 when it cannot be read), from 1024 at the lowest.
func portsBelowEphemeral() (first, n int) {
	low := 32768
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		if f := strings.Fields(string(b)); len(f) == 2 {
			if v, err := strconv.Atoi(f[0]); err == nil && v > 2048 {
				low = v
			}
		}
	}
	first = max(1024, low-12000)
	return first, low - first
}
