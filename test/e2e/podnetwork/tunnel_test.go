package podnetwork_test

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"net"
	"net/netip"
	"regexp"
	"strings"
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

// sendGeneve sends, from node from's namespace (its kernel, its underlay address), one
// Geneve packet to node to that carries a UDP datagram src -> dst:dport, addressed from
// from's gateway MAC to to's, as from's OVS would send it.
func (c *cluster) sendGeneve(from, to string, src, dst netip.Addr, dport uint16) error {
	ctx := context.Background()
	fromNode, err := c.s.Client.CoreV1().Nodes().Get(ctx, from, metav1.GetOptions{})
	if err != nil {
		return err
	}
	toNode, err := c.s.Client.CoreV1().Nodes().Get(ctx, to, metav1.GetOptions{})
	if err != nil {
		return err
	}
	var frame []byte
	if src.Is4() {
		frame = ethernetIPv4UDP(nodeGatewayMAC(fromNode), nodeGatewayMAC(toNode), src, dst, 40000, dport, []byte("forged"))
	} else {
		frame = ethernetIPv6(nodeGatewayMAC(fromNode), nodeGatewayMAC(toNode), src, dst, 17, udp6(src, dst, 40000, dport))
	}
	packet := append(geneveHeader(geneveVNI), frame...)
	underlay := internalIP(toNode, src.Is4())
	if !underlay.IsValid() {
		return fmt.Errorf("node %s has no InternalIP of the family of %s", to, src)
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
	setSubnets(badSubnets(t, good))
	defer setSubnets(good)
	// node1's agent has seen node3's bad record once it counts node3 as a rejected peer.
	framework.Eventually(t, 30*time.Second, "node1's agent to reject node3's bad record", func() error {
		n, err := c.s.AgentMetric("node1", "kovs_agent_tunnel_peers_rejected", nil)
		if err != nil {
			return err
		}
		if n != 1 {
			return fmt.Errorf("kovs_agent_tunnel_peers_rejected is %v, want 1 (node3)", n)
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
		t.Errorf("node1's agent reports %v rejected peers (%v), want node3", n, err)
	}
	setSubnets(good)
	framework.Eventually(t, 30*time.Second, "node1 reaches node3's pod once its record is good again", func() error {
		if r := c.s.Probe(c.pods["a"], framework.PodIPs(c.pods["d"])[0], "80/tcp", time.Second); !r.Connected {
			return fmt.Errorf("%s", framework.Describe(r))
		}
		return nil
	})
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
