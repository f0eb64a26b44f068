package podnetwork_test

import (
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"
	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"

	"github.com/kovs-net/kovs/test/e2e/framework"
)

// checkSpoofing: a pod that forges its source IP, its MAC, or announces itself as another
// pod's address (gratuitous ARP on IPv4, an unsolicited neighbor advertisement on IPv6)
// gets nothing through. Attacker a (node1), target c (node2), victims d (node3, for its
// IP) and b (node1, for its MAC and its address), over the pods' first address family.
func (c *cluster) checkSpoofing(t *testing.T) {
	attacker, target, victim, neighbour := c.pods["a"], c.pods["c"], c.pods["d"], c.pods["b"]
	targetIP, victimIP := framework.PodIPs(target)[0], framework.PodIPs(victim)[0]
	ip := []string{"ip"}
	if targetIP.Is6() {
		ip = []string{"ip", "-6"}
	}
	gateway := c.gateway(t, "node1", targetIP)
	mustConnect := func(why string) {
		t.Helper()
		if r := c.s.Probe(attacker, targetIP, "80/udp", probeTimeout); !r.Connected {
			t.Fatalf("%s: the attacker cannot reach the target honestly: %s", why, framework.Describe(r))
		}
	}
	mustConnect("before")
	// While it forges, the attacker knows the gateway's MAC for good: it sends no ARP or NS
	// of its own, so what the spoof guard drops is the forged datagram.
	gatewayMAC := c.gatewayMAC(t, "node1").String()
	pinGateway := func(t *testing.T) {
		c.execOK(t, attacker, append(ip, "neigh", "replace", gateway.String(), "lladdr", gatewayMAC, "dev", "eth0", "nud", "permanent")...)
	}
	unpinGateway := func(t *testing.T) {
		c.execOK(t, attacker, append(ip, "neigh", "del", gateway.String(), "dev", "eth0")...)
	}

	t.Run("forged source IP", func(t *testing.T) {
		host := fmt.Sprintf("/%d", targetIP.BitLen())
		addArgs := []string{"addr", "add", victimIP.String() + host, "dev", "eth0"}
		if targetIP.Is6() {
			addArgs = append(addArgs, "nodad")
		}
		c.execOK(t, attacker, append(ip, addArgs...)...)
		c.execOK(t, attacker, append(ip, "route", "replace", targetIP.String()+host, "via", gateway.String(), "dev", "eth0", "src", victimIP.String())...)
		pinGateway(t)
		defer func() {
			unpinGateway(t)
			c.execOK(t, attacker, append(ip, "route", "del", targetIP.String()+host)...)
			c.execOK(t, attacker, append(ip, "addr", "del", victimIP.String()+host, "dev", "eth0")...)
		}()
		// Port 82 is served by nobody and probed by no other test: any conntrack entry for
		// it from the victim's address can only be the forged datagram.
		dropped := c.dropped(t, "node1", spoofGuardMiss)
		r := c.s.Probe(attacker, targetIP, "82/udp", probeTimeout)
		if r.Connected || r.Refused {
			t.Errorf("a datagram from forged source %s got an answer: %s", victimIP, framework.Describe(r))
		}
		if entries := c.awaitVerdict(t, "node1", spoofGuardMiss, dropped, 1, func() string {
			return c.conntrack(t, "node1", victimIP, targetIP, 82) + c.conntrack(t, "node2", victimIP, targetIP, 82)
		}); entries != "" {
			t.Errorf("a connection from the forged source was tracked:\n%s", entries)
		}

		// Mutation check: SpoofGuard taking the victim's address from the attacker's port:
		// the datagram must then be tracked on node1 (node2 still drops it: the victim is
		// node3's pod, not an inner source node1's tunnel may carry). Port 91 is probed by
		// no other test.
		attackerIP := framework.PodIPs(attacker)[0]
		src := "nw_src="
		if attackerIP.Is6() {
			src = "ipv6_src="
		}
		mac := strings.TrimSpace(c.execOK(t, attacker, "cat", "/sys/class/net/eth0/address"))
		mutation := c.widenSpoofGuard(t, attacker, mac, src+attackerIP.String()+" ", src+victimIP.String()+" ")
		// Sent again on every check: the switch applies the new flow to the datapath at
		// its next revalidation. No answer comes back to the forged address: node1's
		// conntrack tells.
		framework.Eventually(t, 10*time.Second, "the datagram from the forged source tracked on node1 with SpoofGuard taking it ("+mutation+")", func() error {
			_ = c.s.Probe(attacker, targetIP, "91/udp", 100*time.Millisecond)
			if c.conntrack(t, "node1", victimIP, targetIP, 91) == "" {
				return fmt.Errorf("no conntrack entry")
			}
			return nil
		})
		t.Logf("with SpoofGuard taking %s from the attacker's port, its forged datagram got past it and was tracked on node1", victimIP)
	})
	mustConnect("after forging an IP")

	t.Run("forged MAC", func(t *testing.T) {
		orig := strings.TrimSpace(c.execOK(t, attacker, "cat", "/sys/class/net/eth0/address"))
		forged := strings.TrimSpace(c.execOK(t, neighbour, "cat", "/sys/class/net/eth0/address"))
		c.execOK(t, attacker, "ip", "link", "set", "eth0", "address", forged)
		c.execOK(t, attacker, "ip", "neigh", "flush", "all")
		pinGateway(t)
		defer func() {
			unpinGateway(t)
			c.execOK(t, attacker, "ip", "link", "set", "eth0", "address", orig)
			c.execOK(t, attacker, "ip", "neigh", "flush", "all")
		}()
		// The answer, if any, goes to the attacker's recorded MAC, which its kernel no
		// longer has: the verdict is the spoof guard's drop and node2's conntrack. Port 83
		// is served by nobody and probed by no other test.
		attackerIP := framework.PodIPs(attacker)[0]
		dropped := c.dropped(t, "node1", spoofGuardMiss)
		if r := c.s.Probe(attacker, targetIP, "83/udp", probeTimeout); r.Connected || r.Refused {
			t.Errorf("with the neighbour's MAC %s the attacker got an answer: %s", forged, framework.Describe(r))
		}
		if entries := c.awaitVerdict(t, "node1", spoofGuardMiss, dropped, 1, func() string {
			return c.conntrack(t, "node2", attackerIP, targetIP, 83)
		}); entries != "" {
			t.Errorf("with the neighbour's MAC %s the attacker's datagram reached node2:\n%s", forged, entries)
		}

		// Mutation check: SpoofGuard taking the neighbour's MAC from the attacker's port
		// (the attacker's own IP flow, copied with the forged MAC, above it; removed after):
		// the datagram must then be tracked on node2. Port 90 is probed by no other test.
		mutation := c.widenSpoofGuard(t, attacker, orig, "dl_src="+orig, "dl_src="+forged)
		// Sent again on every check (the new flow reaches the datapath at the switch's next
		// revalidation); its answer goes to the recorded MAC: only node2's conntrack tells.
		framework.Eventually(t, 10*time.Second, "the datagram from the neighbour's MAC tracked on node2 with SpoofGuard taking it ("+mutation+")", func() error {
			_ = c.s.Probe(attacker, targetIP, "90/udp", 100*time.Millisecond)
			if c.conntrack(t, "node2", attackerIP, targetIP, 90) == "" {
				return fmt.Errorf("no conntrack entry")
			}
			return nil
		})
		t.Logf("with SpoofGuard taking the neighbour's MAC %s from the attacker's port, its datagram reached node2", forged)
	})
	mustConnect("after forging a MAC")

	t.Run("forged source to the node through the pod's veth", func(t *testing.T) {
		c.checkHostEndClosed(t, attacker, victim)
	})

	t.Run("announcing another pod's address", func(t *testing.T) {
		c.checkAnnouncement(t, attacker, neighbour)
	})
}

// checkAnnouncement: the attacker announces its neighbour's address at its own MAC to its
// node, the one announcement that could succeed (ARPResponder and NDResponder deliver
// a reply or advertisement to the port that owns its destination MAC, and flood nothing):
// a gratuitous ARP reply (IPv4) or an unsolicited neighbor advertisement with the
// override flag (IPv6), sent to the gateway's MAC. node1 must keep the neighbour's MAC
// for its address. Then the same attack with the spoof guard switched off for the
// attacker's announcements (a flow of the test's above SpoofGuard's, removed at the end)
// must succeed: node1 learns the attacker's MAC. That run proves the attack reaches the
// host and the kernel takes it, so the first run's outcome is the guard's.
func (c *cluster) checkAnnouncement(t *testing.T, attacker, neighbour *corev1.Pod) {
	host := c.hosts["node1"]
	neighbourIP := framework.PodIPs(neighbour)[0]
	reachNeighbour := func(when string) {
		t.Helper()
		if r := c.s.Probe(host, neighbourIP, "80/tcp", probeTimeout); !r.Connected || r.Reply.Identity != "x/b" {
			t.Fatalf("node1 -> b %s: %s", when, framework.Describe(r))
		}
	}
	// The node now has a neighbour entry for b, the one the attack would overwrite.
	reachNeighbour("before the attack")
	attackerMAC := c.mac(t, attacker)
	gatewayMAC := c.gatewayMAC(t, "node1")
	const rounds = 5
	guard, bypass := spoofGuardMiss, "arp"
	var frame []byte
	if neighbourIP.Is6() {
		guard, bypass = spoofGuardNA, "icmp6,icmp_type=136"
		src := linkLocalOf(attackerMAC)
		all := netip.MustParseAddr("ff02::1")
		frame = ethernetIPv6(attackerMAC, gatewayMAC, src, all, 58, unsolicitedNA(attackerMAC, src, all, neighbourIP))
	} else {
		frame = garpReply(attackerMAC, gatewayMAC, neighbourIP)
	}
	learned := func() string {
		out, _ := exec.Command("ip", "-n", c.s.Layout.NodeNetNS("node1"), "neigh", "show", neighbourIP.String()).CombinedOutput()
		if strings.Contains(string(out), attackerMAC.String()) {
			return string(out)
		}
		return ""
	}
	send := func() {
		t.Helper()
		if err := repeat(rounds, func() error { return sendFrame(c.s.NetNSPath(attacker), "eth0", frame) }); err != nil {
			t.Fatal(err)
		}
	}

	dropped := c.dropped(t, "node1", guard)
	send()
	if out := c.awaitVerdict(t, "node1", guard, dropped, rounds, learned); out != "" {
		t.Errorf("node1 learned the attacker's MAC for b's address: %s", out)
	}
	reachNeighbour("after the attack")

	// The guard switched off for the attacker's announcements: the attack must succeed.
	ofport, err := c.s.PodOFPort("node1", attacker.Namespace, attacker.Name)
	if err != nil {
		t.Fatal(err)
	}
	next := 20 // ARPResponder
	if neighbourIP.Is6() {
		next = 21 // NDResponder
	}
	const mutationCookie = "0x29290000"
	c.ofctl(t, "node1", "add-flow", fmt.Sprintf("cookie=%s,table=10,priority=1000,in_port=%d,%s,actions=goto_table:%d",
		mutationCookie, ofport, bypass, next))
	defer func() {
		c.ofctl(t, "node1", "del-flows", "cookie="+mutationCookie+"/-1")
		// node1 forgets the forged entry and learns b's MAC again.
		if out, err := exec.Command("ip", "-n", c.s.Layout.NodeNetNS("node1"), "neigh", "flush", "to", neighbourIP.String()).CombinedOutput(); err != nil {
			t.Errorf("flush node1's neighbour entry for b: %v: %s", err, out)
		}
		reachNeighbour("after the undefended attack, with the guard back")
	}()
	// Sent again on every check: the switch applies the new flow to the datapath at its
	// next revalidation.
	framework.Eventually(t, 10*time.Second, "node1 to learn the attacker's MAC for b's address with the guard off", func() error {
		if err := sendFrame(c.s.NetNSPath(attacker), "eth0", frame); err != nil {
			t.Fatal(err)
		}
		if learned() == "" {
			out, _ := exec.Command("ip", "-n", c.s.Layout.NodeNetNS("node1"), "neigh", "show", neighbourIP.String()).CombinedOutput()
			return fmt.Errorf("node1's entry: %s", strings.TrimSpace(string(out)))
		}
		return nil
	})
	t.Logf("with the spoof guard off for its announcements, the attacker took b's address at node1: %s", strings.TrimSpace(learned()))
}

// widenSpoofGuard copies node1's SpoofGuard flow that takes the attacker's IP packets
// from its port and MAC mac, with old replaced by widened in its match, above it (the mutation
// checks' cookie 0x29290003); the copy is removed when the test ends. It returns the
// flow it added.
func (c *cluster) widenSpoofGuard(t *testing.T, attacker *corev1.Pod, mac, old, widened string) string {
	t.Helper()
	ofport, err := c.s.PodOFPort("node1", attacker.Namespace, attacker.Name)
	if err != nil {
		t.Fatal(err)
	}
	ip := framework.PodIPs(attacker)[0].String()
	var accept string
	for _, f := range c.s.DumpFlows(t, "node1") {
		if f.Table == 10 && strings.Contains(f.Text, fmt.Sprintf("in_port=%d,", ofport)) && strings.Contains(f.Text, "dl_src="+mac) &&
			(strings.Contains(f.Text, "nw_src="+ip+" ") || strings.Contains(f.Text, "ipv6_src="+ip+" ")) {
			accept = strings.Replace(f.Text, old, widened, 1)
		}
	}
	if accept == "" {
		t.Fatalf("node1's SpoofGuard has no flow taking %s from %s at port %d", ip, mac, ofport)
	}
	const mutationCookie = "0x29290003"
	mutation := "cookie=" + mutationCookie + "," + classifierPriority.ReplaceAllString(accept, "priority=1000")
	c.ofctl(t, "node1", "add-flow", mutation)
	t.Cleanup(func() { c.ofctl(t, "node1", "del-flows", "cookie="+mutationCookie+"/-1") })
	return mutation
}

// ofctl runs an ovs-ofctl command on node's br-int (the command, then the bridge, then
// args): the mutation checks add and remove their flows with it. Their cookies (0x2929000N)
// have category 0, which is not kovs's (ovs-flows/README.md, Cookies): the agent's flow
// sync leaves them alone.
func (c *cluster) ofctl(t *testing.T, node, command string, args ...string) {
	t.Helper()
	full := append([]string{"-O", "OpenFlow15", command, c.s.BrIntTarget(node)}, args...)
	if out, err := exec.Command("ovs-ofctl", full...).CombinedOutput(); err != nil {
		t.Fatalf("ovs-ofctl %s: %v: %s", strings.Join(full, " "), err, out)
	}
}

// garpReply is a gratuitous ARP reply to dst's MAC claiming ip is at mac (sender and
// target the same address, sender and target hardware address the same: what Linux takes
// as gratuitous, overriding an entry however recently it was confirmed).
func garpReply(mac, dst net.HardwareAddr, ip netip.Addr) []byte {
	f := arpFrame(mac, ip, 2)
	copy(f[0:6], dst)
	copy(f[32:38], mac)
	return f
}

// unsolicitedNA is a neighbor advertisement (override, not solicited) for target at mac,
// from src to dst, with its checksum.
func unsolicitedNA(mac net.HardwareAddr, src, dst, target netip.Addr) []byte {
	m := naMessage(mac, target)
	binary.BigEndian.PutUint16(m[2:], checksum6(src, dst, 58, m))
	return m
}

func (c *cluster) execOK(t *testing.T, p *corev1.Pod, cmd ...string) string {
	t.Helper()
	out, err := c.s.Exec(p, cmd...)
	if err != nil {
		t.Fatalf("%s: %s: %v\n%s", p.Name, strings.Join(cmd, " "), err, out)
	}
	return out
}

// conntrack returns the node's OVS conntrack entries from src to dst:dport.
func (c *cluster) conntrack(t *testing.T, node string, src, dst netip.Addr, dport int) string {
	out, err := exec.Command("ovs-appctl", "-t", c.s.Layout.OVSDir(node)+"/ovs-vswitchd.ctl", "dpctl/dump-conntrack").CombinedOutput()
	if err != nil {
		t.Fatalf("dump-conntrack on %s: %v: %s", node, err, out)
	}
	var hits []string
	for _, line := range strings.Split(string(out), "\n") {
		if strings.Contains(line, "src="+src.String()+",") && strings.Contains(line, "dst="+dst.String()+",") &&
			strings.Contains(line, fmt.Sprintf("dport=%d)", dport)) {
			hits = append(hits, line)
		}
	}
	return strings.Join(hits, "\n")
}

// onLink runs send in a network namespace with its interface ifname and the MAC mac.
func onLink(netnsPath, ifname, mac string, send func(*net.Interface, net.HardwareAddr) error) error {
	hw, err := net.ParseMAC(mac)
	if err != nil {
		return err
	}
	return ns.WithNetNSPath(netnsPath, func(ns.NetNS) error {
		iface, err := net.InterfaceByName(ifname)
		if err != nil {
			return err
		}
		return send(iface, hw)
	})
}

// repeat calls send count times, 20 ms apart.
func repeat(count int, send func() error) error {
	for i := 0; i < count; i++ {
		if err := send(); err != nil {
			return err
		}
		time.Sleep(20 * time.Millisecond)
	}
	return nil
}

// naMessage is an ICMPv6 neighbor advertisement (override) for target at mac, with a
// target link-layer address option; the checksum is left to the kernel.
func naMessage(mac net.HardwareAddr, target netip.Addr) []byte {
	m := make([]byte, 32)
	m[0] = 136                               // neighbor advertisement
	binary.BigEndian.PutUint32(m[4:], 1<<29) // override
	t16 := target.As16()
	copy(m[8:24], t16[:])
	m[24], m[25] = 2, 1 // target link-layer address, 8 bytes
	copy(m[26:32], mac)
	return m
}

func arpFrame(mac net.HardwareAddr, ip netip.Addr, op uint16) []byte {
	f := make([]byte, 42)
	copy(f[0:6], []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff})
	copy(f[6:12], mac)
	binary.BigEndian.PutUint16(f[12:], unix.ETH_P_ARP)
	binary.BigEndian.PutUint16(f[14:], 1)      // Ethernet
	binary.BigEndian.PutUint16(f[16:], 0x0800) // IPv4
	f[18], f[19] = 6, 4
	binary.BigEndian.PutUint16(f[20:], op)
	ip4 := ip.As4()
	copy(f[22:28], mac)
	copy(f[28:32], ip4[:])
	copy(f[38:42], ip4[:]) // target protocol address = sender's: gratuitous
	if op == 2 {
		copy(f[32:38], []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff})
	}
	return f
}

func htons(v uint16) uint16 { return v<<8 | v>>8 }

// dropFlow names the br-int flow that decides a drop: its table, its priority and a part
// of its text that tells it from the table's other flows at that priority.
type dropFlow struct {
	table, priority int
	match           string
}

// The drop flows the attack tests expect to take their packets (ovs-flows/README.md).
var (
	classifierMiss  = dropFlow{0, 0, "actions=drop"}                       // a tunnel packet of no known peer and inner source
	spoofGuardMiss  = dropFlow{10, 0, "actions=drop"}                      // a pod's frame from another MAC or address
	spoofGuardNS    = dropFlow{10, 205, "icmp_type=135"}                   // an NS from a pod not its own (a DAD probe from ::)
	spoofGuardNA    = dropFlow{10, 205, "icmp_type=136"}                   // an NA from a pod not for its own address
	ndRouterAdvert  = dropFlow{21, 90, "icmp_type=134"}                    // a router advertisement
	linkLocalSource = dropFlow{60, 300, "ipv6_src=fe80::/10 actions=drop"} // a link-local source routed
)

func (f dropFlow) String() string {
	return fmt.Sprintf("table %d priority %d (%s)", f.table, f.priority, f.match)
}

// dropped is how many packets node's drop flow f has taken so far.
func (c *cluster) dropped(t *testing.T, node string, f dropFlow) uint64 {
	t.Helper()
	return c.s.FlowPackets(t, node, f.table, f.priority, f.match)
}

// awaitVerdict waits for the positive sign of an attack's outcome, never for time alone:
// node's drop flow f has taken n packets more than before (the attack's packets were seen
// and dropped there), or leaked reports what got through. It returns what leaked found
// last ("" when the drop flow counted the packets and nothing leaked). OVS pushes a
// datapath flow's counters to its OpenFlow flow within about a second.
func (c *cluster) awaitVerdict(t *testing.T, node string, f dropFlow, before uint64, n int, leaked func() string) string {
	t.Helper()
	var got string
	framework.Eventually(t, 10*time.Second, fmt.Sprintf("%d packets dropped by %s's %s, or one of them through", n, node, f), func() error {
		if got = leaked(); got != "" {
			return nil
		}
		if now := c.dropped(t, node, f); now < before+uint64(n) {
			return fmt.Errorf("the drop flow took %d packets of %d", now-before, n)
		}
		return nil
	})
	return got
}
