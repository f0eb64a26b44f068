package datapathbench_test

import (
	"fmt"
	"net/netip"
	"os/exec"
	"strconv"
	"strings"
	"testing"

	"github.com/kovs-net/kovs/go-controller/pkg/pipeline"
	"github.com/kovs-net/kovs/go-controller/pkg/sandbox"
	"github.com/kovs-net/kovs/test/e2e/framework"
)

// The baseline's names inside each node's namespace and OVS (private to the sandbox).
const (
	bareBridge = "br-bare"
	bareVeth   = "bare-veth"
	bareTunnel = "bare-gnv"
	// bareTunnelPort is the baseline Geneve port's UDP port: kovs's own Geneve port uses the
	// standard 6081 with remote_ip=flow, and ovs-vswitchd tells tunnel ports of one type
	// apart by their UDP port before their remote address, so the baseline's must differ.
	bareTunnelPort = 6082
)

// bare is the baseline: on each of two nodes, a namespace with a veth into a bare OVS
// bridge of the node's own ovs-vswitchd (the userspace datapath kovs's br-int uses), one
// NORMAL flow, and a Geneve port to the other node over the same underlay, with kovs's
// VNI.
type bare struct {
	s     *framework.Sandbox
	nodes []string
	netns []string // per node, the pod-like namespace
	addrs []netip.Addr
}

// bareAddr is the address of the baseline's pod-like end on node i.
func bareAddr(i int) netip.Addr { return netip.AddrFrom4([4]byte{192, 168, 250, byte(i + 1)}) }

// setUpBare builds the baseline on the nodes with the pod MTU mtu; txOff turns TX
// checksum offload off on the pod-like ends, as kovs-cni does on the userspace datapath.
// It is removed when the benchmark ends, before the sandbox.
func setUpBare(b *testing.B, s *framework.Sandbox, nodes []string, mtu int, txOff bool) *bare {
	bn := &bare{s: s, nodes: nodes}
	b.Cleanup(bn.remove)
	for i, node := range nodes {
		peer := s.NodeIPs(b, nodes[1-i])[0]
		podNS := s.Layout.NetNSPrefix() + "bare-" + node
		bn.netns = append(bn.netns, sandbox.NetNSPath(podNS))
		bn.addrs = append(bn.addrs, bareAddr(i))
		if err := bn.node(node, podNS, peer, bareAddr(i), mtu, txOff); err != nil {
			b.Fatalf("baseline on %s: %v", node, err)
		}
	}
	return bn
}

func (bn *bare) node(node, podNS string, peer, addr netip.Addr, mtu int, txOff bool) error {
	nodeNS := bn.s.Layout.NodeNetNS(node)
	m := strconv.Itoa(mtu)
	steps := [][]string{
		{"ip", "netns", "add", podNS},
		{"ip", "-n", podNS, "link", "set", "lo", "up"},
		{"ip", "-n", nodeNS, "link", "add", bareVeth, "mtu", m, "type", "veth", "peer", "name", "eth0", "mtu", m, "netns", podNS},
		{"ip", "-n", nodeNS, "link", "set", bareVeth, "up"},
		{"ip", "-n", podNS, "addr", "add", addr.String() + "/24", "dev", "eth0"},
		{"ip", "-n", podNS, "link", "set", "eth0", "up"},
	}
	if txOff {
		steps = append(steps, []string{"ip", "netns", "exec", podNS, "ethtool", "-K", "eth0", "tx", "off"})
	}
	steps = append(steps,
		[]string{"ovs-vsctl", "--db", bn.s.OVSDB(node), "--timeout=30",
			"--", "add-br", bareBridge, "--", "set", "bridge", bareBridge, "datapath_type=netdev", "fail_mode=secure",
			"--", "add-port", bareBridge, bareVeth,
			"--", "add-port", bareBridge, bareTunnel, "--", "set", "interface", bareTunnel, "type=geneve",
			"options:remote_ip=" + peer.String(), "options:key=" + strconv.FormatUint(pipeline.TunnelVNI, 10),
			"options:dst_port=" + strconv.Itoa(bareTunnelPort)},
		[]string{"ovs-ofctl", "-O", "OpenFlow15", "add-flow", bareTarget(bn.s, node), "priority=0,actions=NORMAL"},
	)
	for _, step := range steps {
		if out, err := exec.Command(step[0], step[1:]...).CombinedOutput(); err != nil {
			return fmt.Errorf("%s: %w: %s", strings.Join(step, " "), err, out)
		}
	}
	return nil
}

// bareTarget is the ovs-ofctl target of a node's baseline bridge.
func bareTarget(s *framework.Sandbox, node string) string {
	return "unix:" + s.Layout.OVSDir(node) + "/" + bareBridge + ".mgmt"
}

// remove deletes the baseline's bridges and namespaces (the veths go with them); what is
// already gone is fine. The sandbox's `down` would remove them too (same prefix, same
// ovs-vswitchd), but the benchmark leaves nothing of its own behind.
func (bn *bare) remove() {
	for i, node := range bn.nodes {
		_ = exec.Command("ovs-vsctl", "--db", bn.s.OVSDB(node), "--timeout=10", "--if-exists", "del-br", bareBridge).Run()
		_ = exec.Command("ip", "-n", bn.s.Layout.NodeNetNS(node), "link", "del", bareVeth).Run()
		if i < len(bn.netns) {
			_ = exec.Command("ip", "netns", "delete", strings.TrimPrefix(bn.netns[i], "/run/netns/")).Run()
		}
	}
}
