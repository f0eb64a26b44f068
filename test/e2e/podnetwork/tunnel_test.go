package podnetwork_test

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/kovs-net/kovs/go-controller/pkg/controller/ipam"
	"github.com/kovs-net/kovs/go-controller/pkg/sandbox"
	"github.com/kovs-net/kovs/test/e2e/framework"
)

// Geneve as kovs runs it: UDP port 6081, VNI 100.
const (
	genevePort = 6081
	geneveVNI  = 100
)

// checkTunnelInnerSource is a compromised node's attack on the tunnel (issue 14): root on
// node1 sends node2 Geneve packets from node1's own underlay address whose inner source is
// another node's pod (d, on node3). node2 must drop them: the inner source of a tunnel
// packet must belong to the peer it comes from. The same packet with an inner source of
// node1's own (pod a) is the control: it must get through, so the drop is not an accident
// of how the packet was made. Seen in node2's OVS conntrack, where every packet that passes
// the classifier is tracked; the verdict waits for the Classifier's drop flow to count the
// forged packets. Over the pods' first family, on an underlay of the same family.
func (c *cluster) checkTunnelInnerSource(t *testing.T) {
	a, cc, d := c.pods["a"], c.pods["c"], c.pods["d"]
	target := framework.PodIPs(cc)[0]
	const controlPort, attackPort, mutatedPort, forgedCount = 84, 85, 89, 5
	send := func(src netip.Addr, dport uint16) {
		t.Helper()
		if err := c.sendGeneve("node1", "node2", src, target, dport); err != nil {
			t.Fatal(err)
		}
	}
	send(framework.PodIPs(a)[0], controlPort)
	framework.Eventually(t, 5*time.Second, "the control packet (inner source node1's pod a) tracked on node2", func() error {
		if c.conntrack(t, "node2", framework.PodIPs(a)[0], target, controlPort) == "" {
			return fmt.Errorf("no conntrack entry")
		}
		return nil
	})
	forged := framework.PodIPs(d)[0]
	before := c.dropped(t, "node2", classifierMiss)
	for range forgedCount {
		send(forged, attackPort)
	}
	if entries := c.awaitVerdict(t, "node2", classifierMiss, before, forgedCount, func() string {
		return c.conntrack(t, "node2", forged, target, attackPort)
	}); entries != "" {
		t.Errorf("node2 accepted from node1's tunnel a packet from node3's pod %s:\n%s", forged, entries)
	}

	// Mutation check: node2's Classifier widened to take node3's pod d as an inner source
	// from node1 (node1's own flow for pod a's block, copied with d's address, above it;
	// removed after): the forged packet must then be tracked on node2. The drop above is
	// the Classifier's, and the conntrack observation sees a forged packet that passes.
	own := framework.PodIPs(a)[0]
	var accept string
	for _, f := range c.s.DumpFlows(t, "node2") {
		if f.Table != 0 {
			continue
		}
		if m := innerSource.FindStringSubmatch(f.Text); m != nil && strings.Contains(f.Text, "tun_") {
			if p, err := netip.ParsePrefix(m[2]); err == nil && p.Contains(own) && p.Bits() < own.BitLen() {
				accept = strings.Replace(f.Text, m[0], m[1]+"="+forged.String(), 1)
			}
		}
	}
	if accept == "" {
		t.Fatalf("node2's Classifier has no flow taking node1's pod block (of %s) from the tunnel", own)
	}
	const mutationCookie = "0x29290002"
	mutation := "cookie=" + mutationCookie + "," + classifierPriority.ReplaceAllString(accept, "priority=1000")
	c.ofctl(t, "node2", "add-flow", mutation)
	defer c.ofctl(t, "node2", "del-flows", "cookie="+mutationCookie+"/-1")
	// The switch applies the new flow to the datapath at its next revalidation: the attack
	// is sent again on every check until it shows.
	framework.Eventually(t, 10*time.Second, "the forged packet tracked on node2 with the Classifier widened ("+mutation+")", func() error {
		send(forged, mutatedPort)
		if c.conntrack(t, "node2", forged, target, mutatedPort) == "" {
			return fmt.Errorf("no conntrack entry")
		}
		return nil
	})
	t.Logf("with node2's Classifier taking %s from node1's tunnel, the forged packet got through", forged)
}

// innerSource finds a flow's inner source match; classifierPriority its priority.
var (
	innerSource        = regexp.MustCompile(`\b(nw_src|ipv6_src)=([0-9a-fA-F.:]+/[0-9]+)`)
	classifierPriority = regexp.MustCompile(`\bpriority=[0-9]+`)
)

// sendGeneve sends, as root on node from (a compromised node), one Geneve packet to node
// to that carries a UDP datagram src -> dst:dport, addressed from from's gateway MAC to
// to's, as from's OVS would send it. It writes the whole frame, outer Ethernet, IP and UDP
// from from's underlay address, on from's uplink bridge with a packet socket: past the
// host's netfilter, so past the tunnel guard (kovs-tunnel) that keeps the node's
// processes' datagrams from the peers' Geneve port.
func (c *cluster) sendGeneve(from, to string, src, dst netip.Addr, dport uint16) error {
	packet, underlay, err := c.geneveTo(from, to, src, dst, dport)
	if err != nil {
		return err
	}
	self, err := c.nodeInternalIP(from, src.Is4())
	if err != nil {
		return err
	}
	fromMAC, err := uplinkMAC(sandbox.NetNSPath(c.s.Layout.NodeNetNS(from)))
	if err != nil {
		return err
	}
	toMAC, err := uplinkMAC(sandbox.NetNSPath(c.s.Layout.NodeNetNS(to)))
	if err != nil {
		return err
	}
	var frame []byte
	if self.Is4() {
		frame = ethernetIPv4UDP(fromMAC, toMAC, self, underlay, 40001, genevePort, packet)
	} else {
		frame = ethernetIPv6(fromMAC, toMAC, self, underlay, 17, udp6Payload(self, underlay, 40001, genevePort, packet))
	}
	return sendFrame(sandbox.NetNSPath(c.s.Layout.NodeNetNS(from)), sandbox.UplinkBridge, frame)
}

// sendGeneveFromSocket sends the same Geneve packet as sendGeneve, the way any process on
// node from can, without privilege: a datagram from an ordinary UDP socket in from's
// namespace, through the host's stack. (The test's socket is root's; the guard does not
// look at who sends, and a process without privilege can send no other way.)
func (c *cluster) sendGeneveFromSocket(from, to string, src, dst netip.Addr, dport uint16) error {
	packet, underlay, err := c.geneveTo(from, to, src, dst, dport)
	if err != nil {
		return err
	}
	remote := net.JoinHostPort(underlay.String(), fmt.Sprint(genevePort))
	return ns.WithNetNSPath(sandbox.NetNSPath(c.s.Layout.NodeNetNS(from)), func(ns.NetNS) error {
		conn, err := net.Dial("udp", remote)
		if err != nil {
			return err
		}
		defer conn.Close()
		_, err = conn.Write(packet)
		return err
	})
}

// geneveTo is the Geneve payload (header and inner frame) of a UDP datagram src ->
// dst:dport from node from to node to, and to's underlay address of src's family.
func (c *cluster) geneveTo(from, to string, src, dst netip.Addr, dport uint16) ([]byte, netip.Addr, error) {
	ctx := context.Background()
	fromNode, err := c.s.Client.CoreV1().Nodes().Get(ctx, from, metav1.GetOptions{})
	if err != nil {
		return nil, netip.Addr{}, err
	}
	toNode, err := c.s.Client.CoreV1().Nodes().Get(ctx, to, metav1.GetOptions{})
	if err != nil {
		return nil, netip.Addr{}, err
	}
	var frame []byte
	if src.Is4() {
		frame = ethernetIPv4UDP(nodeGatewayMAC(fromNode), nodeGatewayMAC(toNode), src, dst, 40000, dport, []byte("forged"))
	} else {
		frame = ethernetIPv6(nodeGatewayMAC(fromNode), nodeGatewayMAC(toNode), src, dst, 17, udp6(src, dst, 40000, dport))
	}
	underlay := internalIP(toNode, src.Is4())
	if !underlay.IsValid() {
		return nil, netip.Addr{}, fmt.Errorf("node %s has no InternalIP of the family of %s", to, src)
	}
	return append(geneveHeader(geneveVNI), frame...), underlay, nil
}

// nodeInternalIP is the node's first InternalIP of the family (IPv4 if ipv4).
func (c *cluster) nodeInternalIP(node string, ipv4 bool) (netip.Addr, error) {
	n, err := c.s.Client.CoreV1().Nodes().Get(context.Background(), node, metav1.GetOptions{})
	if err != nil {
		return netip.Addr{}, err
	}
	if a := internalIP(n, ipv4); a.IsValid() {
		return a, nil
	}
	return netip.Addr{}, fmt.Errorf("node %s has no InternalIP of the family", node)
}

// uplinkMAC is the MAC of the uplink bridge (which holds the node's address) in a node's
// namespace.
func uplinkMAC(netnsPath string) (net.HardwareAddr, error) {
	var mac net.HardwareAddr
	err := ns.WithNetNSPath(netnsPath, func(ns.NetNS) error {
		iface, err := net.InterfaceByName(sandbox.UplinkBridge)
		if err != nil {
			return err
		}
		mac = iface.HardwareAddr
		return nil
	})
	return mac, err
}

// udp6Payload is a UDP datagram carrying payload with its checksum over the IPv6
// pseudo-header.
func udp6Payload(src, dst netip.Addr, sport, dport uint16, payload []byte) []byte {
	u := make([]byte, 8+len(payload))
	binary.BigEndian.PutUint16(u[0:], sport)
	binary.BigEndian.PutUint16(u[2:], dport)
	binary.BigEndian.PutUint16(u[4:], uint16(len(u)))
	copy(u[8:], payload)
	binary.BigEndian.PutUint16(u[6:], checksum6(src, dst, 17, u))
	return u
}

// internalIP is the node's first InternalIP of the family (IPv4 if ipv4).
func internalIP(n *corev1.Node, ipv4 bool) netip.Addr {
	for _, a := range n.Status.Addresses {
		if ip, err := netip.ParseAddr(a.Address); err == nil && a.Type == corev1.NodeInternalIP && ip.Is4() == ipv4 {
			return ip
		}
	}
	return netip.Addr{}
}

func nodeGatewayMAC(n *corev1.Node) net.HardwareAddr {
	ann, err := ipam.ParseNodeSubnetsAnnotation(n.Annotations[ipam.NodeSubnetsAnnotationKey])
	if err != nil {
		return net.HardwareAddr{2, 0, 0, 0, 0, 1}
	}
	mac := ipam.NodeGatewayMAC(ann.Blocks())
	return net.HardwareAddr(mac[:])
}

// geneveHeader is a Geneve header without options carrying an Ethernet frame.
func geneveHeader(vni uint32) []byte {
	h := make([]byte, 8)
	binary.BigEndian.PutUint16(h[2:], 0x6558) // transparent Ethernet bridging
	binary.BigEndian.PutUint32(h[4:], vni<<8)
	return h
}

// ethernetIPv4UDP is an Ethernet frame with an IPv4 UDP datagram (UDP checksum 0: none).
func ethernetIPv4UDP(srcMAC, dstMAC net.HardwareAddr, src, dst netip.Addr, sport, dport uint16, payload []byte) []byte {
	f := make([]byte, 14+20+8+len(payload))
	copy(f[0:6], dstMAC)
	copy(f[6:12], srcMAC)
	binary.BigEndian.PutUint16(f[12:], 0x0800)
	ip := f[14:34]
	ip[0] = 0x45
	binary.BigEndian.PutUint16(ip[2:], uint16(20+8+len(payload)))
	ip[8], ip[9] = 64, 17
	s4, d4 := src.As4(), dst.As4()
	copy(ip[12:16], s4[:])
	copy(ip[16:20], d4[:])
	binary.BigEndian.PutUint16(ip[10:], ipChecksum(ip))
	udp := f[34:42]
	binary.BigEndian.PutUint16(udp[0:], sport)
	binary.BigEndian.PutUint16(udp[2:], dport)
	binary.BigEndian.PutUint16(udp[4:], uint16(8+len(payload)))
	copy(f[42:], payload)
	return f
}

func ipChecksum(h []byte) uint16 {
	var sum uint32
	for i := 0; i+1 < len(h); i += 2 {
		sum += uint32(binary.BigEndian.Uint16(h[i:]))
	}
	for sum>>16 != 0 {
		sum = sum&0xffff + sum>>16
	}
	return ^uint16(sum)
}

// checkBadPeer: one peer whose recorded subnets are invalid for node1 (a block outside the
// cluster CIDRs on node3, written as kovs-controller while the controller is stopped, so
// nothing corrects it) must not stop node1's flows (issue 14). node1's agent skips node3
// and reports it; a change that needs a flow sync, a new Service in front of node2's pod,
// reaches node1's br-int and serves node1's pod.
func (c *cluster) checkBadPeer(t *testing.T) {
	ctx := context.Background()
	controller := c.s.ClientAs(t, framework.ControllerUser, "system:serviceaccounts", "system:serviceaccounts:kube-system")
	node3, err := c.s.Client.CoreV1().Nodes().Get(ctx, "node3", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	good := node3.Annotations[ipam.NodeSubnetsAnnotationKey]
	resume := c.s.Pause(t, "kovs-controller")
	defer resume()
	setSubnets := func(value string) {
		t.Helper()
		patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{ipam.NodeSubnetsAnnotationKey: value}}})
		if _, err := controller.CoreV1().Nodes().Patch(ctx, "node3", types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
			t.Fatalf("set node3's subnets to %s: %v", value, err)
		}
	}
	history := c.recordPeer(t, "node1", "node3", node3.ResourceVersion)
	setSubnets(badSubnets(t, good))
	defer setSubnets(good)
	// node1's agent has seen node3's bad record once it counts node3 as a rejected peer.
	framework.Eventually(t, 30*time.Second, "node1's agent to reject node3's bad record", func() error {
		n, err := c.s.AgentMetric("node1", "kovs_agent_tunnel_peers_rejected", nil)
		if err != nil {
			return err
		}
		if n != 1 {
			return fmt.Errorf("kovs_agent_tunnel_peers_rejected is %v, want 1 (node3); %s\n%s", n, c.peersSeen(ctx, "node1", "node3"), history)
		}
		return nil
	})

	cc := c.pods["c"]
	if cc.Labels["app"] == "" {
		patch := []byte(`{"metadata":{"labels":{"app":"bad-peer-backend"}}}`)
		if _, err := c.s.Client.CoreV1().Pods("x").Patch(ctx, "c", types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	svc := c.s.CreateService(t, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "x", Name: "bad-peer"},
		Spec: corev1.ServiceSpec{Selector: map[string]string{"app": "bad-peer-backend"},
			Ports: []corev1.ServicePort{{Name: "tcp", Port: 80, Protocol: corev1.ProtocolTCP}}}})
	defer func() { _ = c.s.Client.CoreV1().Services("x").Delete(ctx, svc.Name, metav1.DeleteOptions{}) }()
	c.s.WaitEndpoints(t, "x", "bad-peer", []string{"c"}, 30*time.Second)
	vip := framework.ClusterIPs(svc)[0]
	framework.Eventually(t, 30*time.Second, "node1's pod a to reach the new Service while node3's record is bad", func() error {
		if r := c.s.Probe(c.pods["a"], vip, "80/tcp", time.Second); !r.Connected || r.Reply.Identity != "x/c" {
			return fmt.Errorf("a -> %s:80: %s", vip, framework.Describe(r))
		}
		return nil
	})
	if n, err := c.s.AgentMetric("node1", "kovs_agent_tunnel_peers_rejected", nil); err != nil || n != 1 {
		t.Errorf("node1's agent reports %v rejected peers (%v), want node3; %s\n%s", n, err, c.peersSeen(ctx, "node1", "node3"), history)
	}
	setSubnets(good)
	framework.Eventually(t, 30*time.Second, "node1 reaches node3's pod once its record is good again", func() error {
		if r := c.s.Probe(c.pods["a"], framework.PodIPs(c.pods["d"])[0], "80/tcp", time.Second); !r.Connected {
			return fmt.Errorf("%s", framework.Describe(r))
		}
		return nil
	})
}

// peersSeen says what node's agent has for peer (its /status) and what the API holds
// for peer's records: what a failed wait on a peer needs to tell its cause.
func (c *cluster) peersSeen(ctx context.Context, node, peer string) string {
	var out []string
	if st, err := c.s.AgentStatus(node); err != nil {
		out = append(out, err.Error())
	} else {
		out = append(out, fmt.Sprintf("%s's agent: %s, flows at generation %d of %d",
			node, peerView(st), st.Flows.InstalledGeneration, st.Flows.DesiredGeneration))
	}
	if n, err := c.s.Client.CoreV1().Nodes().Get(ctx, peer, metav1.GetOptions{}); err != nil {
		out = append(out, err.Error())
	} else {
		out = append(out, fmt.Sprintf("%s in the API (resourceVersion %s): %s=%s, %s=%s, addresses %v", peer, n.ResourceVersion,
			ipam.NodeSubnetsAnnotationKey, n.Annotations[ipam.NodeSubnetsAnnotationKey],
			ipam.NodeAddressesAnnotationKey, n.Annotations[ipam.NodeAddressesAnnotationKey], n.Status.Addresses))
	}
	return strings.Join(out, "; ")
}

// badSubnets is a node-subnets record like good whose IPv4 block lies outside the
// cluster CIDRs.
func badSubnets(t *testing.T, good string) string {
	ann, err := ipam.ParseNodeSubnetsAnnotation(good)
	if err != nil {
		t.Fatal(err)
	}
	var blocks []netip.Prefix
	for _, b := range ann.Blocks() {
		if b.Addr().Is4() {
			b = netip.MustParsePrefix("10.99.0.0/24")
		}
		blocks = append(blocks, b)
	}
	bad, err := ipam.NewNodeSubnetsAnnotation(blocks)
	if err != nil {
		t.Fatal(err)
	}
	value, err := bad.Annotation()
	if err != nil {
		t.Fatal(err)
	}
	return value
}

// checkForgedGeneveFromHost is the attack any process on a node can make without
// privilege (issue 29): a UDP datagram from an ordinary socket in node1's namespace to
// node2's Geneve port, posing as node1's pod a (an inner source node1's tunnel may carry)
// towards node2's pod c. node1's tunnel guard (nftables table inet kovs-tunnel, output
// hook) must drop it: the verdict waits for the guard's counter to take every forged
// datagram, and node2's OVS conntrack, where every packet the Classifier lets in is
// tracked, must not have seen one. Mutation check: with node1's kovs-tunnel table deleted
// (the defence off; the agent writes it again within 30 s, or the test when it ends), the
// same datagram must be tracked on node2.
func (c *cluster) checkForgedGeneveFromHost(t *testing.T) {
	a, cc := c.pods["a"], c.pods["c"]
	src, target := framework.PodIPs(a)[0], framework.PodIPs(cc)[0]
	// Ports no other subtest of the sandbox sends to: a conntrack entry another left on
	// node2 (spoof6's control, a→c on 86) would read as a leak.
	const attackPort, mutatedPort, forgedCount = 93, 94, 5
	send := func(dport uint16) {
		t.Helper()
		// A datagram netfilter drops on the output path fails its write with EPERM: the
		// counter, not the error, is the evidence read below.
		if err := c.sendGeneveFromSocket("node1", "node2", src, target, dport); err != nil && !errors.Is(err, syscall.EPERM) {
			t.Fatal(err)
		}
	}
	// Without a guard to read, only a leak ends the wait below.
	before, guardErr := c.tunnelGuardDropped("node1")
	for range forgedCount {
		send(attackPort)
	}
	var leaked string
	framework.Eventually(t, 10*time.Second, fmt.Sprintf("node1's tunnel guard to drop %d forged datagrams, or one of them tracked on node2", forgedCount), func() error {
		if leaked = c.conntrack(t, "node2", src, target, attackPort); leaked != "" {
			return nil
		}
		now, err := c.tunnelGuardDropped("node1")
		if err = errors.Join(guardErr, err); err != nil {
			return err
		}
		if now < before+forgedCount {
			return fmt.Errorf("the guard dropped %d of %d", now-before, forgedCount)
		}
		return nil
	})
	if leaked != "" {
		guard, _ := exec.Command("ip", "netns", "exec", c.s.Layout.NodeNetNS("node1"), "nft", "list", "table", "inet", "kovs-tunnel").CombinedOutput()
		now, err := c.tunnelGuardDropped("node1")
		t.Errorf("node2 accepted Geneve that a process on node1 sent from a UDP socket, posing as %s:\n%s\nnode1's guard had dropped %d (%v) since the first send; its table:\n%s",
			src, leaked, now-before, errors.Join(guardErr, err), guard)
	}

	// Mutation check: the guard off, the forged datagram gets through.
	netns := c.s.Layout.NodeNetNS("node1")
	saved, err := exec.Command("ip", "netns", "exec", netns, "nft", "list", "table", "inet", "kovs-tunnel").CombinedOutput()
	if err != nil {
		t.Fatalf("node1: nft list table inet kovs-tunnel: %v: %s", err, saved)
	}
	defer func() {
		script := "table inet kovs-tunnel {}\ndelete table inet kovs-tunnel\n" + string(saved)
		cmd := exec.Command("ip", "netns", "exec", netns, "nft", "-f", "-")
		cmd.Stdin = strings.NewReader(script)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("node1: restore kovs-tunnel: %v: %s", err, out)
		}
	}()
	framework.Eventually(t, 10*time.Second, "the forged datagram tracked on node2 with node1's tunnel guard deleted", func() error {
		// Deleted again in every round: the agent rewrites the table every 30 s.
		if out, err := exec.Command("ip", "netns", "exec", netns, "nft", "delete", "table", "inet", "kovs-tunnel").CombinedOutput(); err != nil &&
			!strings.Contains(string(out), "No such file") {
			t.Fatalf("node1: delete kovs-tunnel: %v: %s", err, out)
		}
		send(mutatedPort)
		if c.conntrack(t, "node2", src, target, mutatedPort) == "" {
			return fmt.Errorf("no conntrack entry")
		}
		return nil
	})
	t.Logf("without node1's tunnel guard, a datagram from a UDP socket on node1 reached node2 as %s's", src)
}

// tunnelGuardDropped is what node's tunnel guard (table inet kovs-tunnel) has dropped: the
// sum of its rules' packet counters.
func (c *cluster) tunnelGuardDropped(node string) (uint64, error) {
	out, err := exec.Command("ip", "netns", "exec", c.s.Layout.NodeNetNS(node), "nft", "list", "chain", "inet", "kovs-tunnel", "output").CombinedOutput()
	if err != nil {
		return 0, fmt.Errorf("%s: nft list chain inet kovs-tunnel output: %v: %s", node, err, out)
	}
	var sum uint64
	rules := 0
	for _, m := range guardCounter.FindAllStringSubmatch(string(out), -1) {
		n, err := strconv.ParseUint(m[1], 10, 64)
		if err != nil {
			return 0, err
		}
		sum += n
		rules++
	}
	if rules == 0 {
		return 0, fmt.Errorf("%s: kovs-tunnel's output chain has no counted drop:\n%s", node, out)
	}
	return sum, nil
}

var guardCounter = regexp.MustCompile(`udp dport 6081 counter packets ([0-9]+) bytes [0-9]+ drop`)
