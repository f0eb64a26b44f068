package agent

import (
	"context"
	"encoding/binary"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/kovs-net/kovs/go-controller/pkg/ovs"
	"github.com/kovs-net/kovs/go-controller/pkg/ovs/ovstest"
	"github.com/kovs-net/kovs/go-controller/pkg/pipeline"
	"github.com/kovs-net/kovs/go-controller/pkg/policy"
)

// trafficRig is br-int of a real ovs-vswitchd (userspace datapath) with the agent's
// pipeline for four local pods, each an internal port whose tap, in ovs-vswitchd's network
// namespace, the test sends from and listens on; the flow syncer runs as the agent runs
// it, the agent's invalidation after every bundle that touches a policy table included.
type trafficRig struct {
	t      *testing.T
	rig    *ovstest.Rig
	of     *ovs.OpenFlow
	state  *NodeState
	syncer *FlowSyncer
	gen    uint64
	sport  uint16
	pods   map[string]pipeline.PodPort
}

// The pods: a, b, c and d at 10.244.1.10-13 on ofports 3-6, tap "p<name>".
var trafficPods = []pipeline.PodPort{testPod("a", 3, 10), testPod("b", 4, 11), testPod("c", 5, 12), testPod("d", 6, 13)}

// newTrafficRig starts the rig with the agent's --datapath-invalidation set to mode.
func newTrafficRig(t *testing.T, mode string) *trafficRig {
	rig := ovstest.Start(t)
	r := &trafficRig{t: t, rig: rig, sport: 20000, pods: map[string]pipeline.PodPort{}}
	// The kernel sends nothing of its own through the taps (no IPv6 autoconfiguration).
	r.inVswitchdNetns(func() error {
		return os.WriteFile("/proc/sys/net/ipv6/conf/default/disable_ipv6", []byte("1"), 0o644)
	})
	rig.Vsctl(t, "add-br", "br-int", "--", "set", "bridge", "br-int", "datapath_type=netdev",
		"fail_mode=secure", "protocols=OpenFlow13,OpenFlow14,OpenFlow15",
		"other_config:disable-in-band=true", "other_config:datapath-id=00000a0000000001")
	for _, p := range trafficPods {
		r.pods[p.Name] = p
		rig.Vsctl(t, "add-port", "br-int", "p"+p.Name, "--", "set", "interface", "p"+p.Name,
			"type=internal", fmt.Sprintf("ofport_request=%d", p.OFPort))
	}
	r.inVswitchdNetns(func() error {
		for _, p := range trafficPods {
			link, err := netlink.LinkByName("p" + p.Name)
			if err != nil {
				return err
			}
			if err := netlink.LinkSetUp(link); err != nil {
				return err
			}
		}
		return nil
	})
	of, err := ovs.NewOpenFlow(ovs.OpenFlowConfig{Bridge: "br-int", RunDir: rig.Dir, VswitchdCtl: rig.VswitchdCtl})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(of.Close)
	r.of = of
	r.state = NewNodeState(1, nil)
	r.state.SetNode(testNodeConfig())
	r.state.EnablePolicy("node-1")
	for _, p := range trafficPods {
		r.state.SetPod("p"+p.Name, p)
	}
	a := &Agent{of: of, netdev: true, cfg: Config{DatapathInvalidation: mode}}
	r.syncer = NewFlowSyncer(OpenFlowSwitch(of), r.state.Desired, time.Hour)
	if mode == revalidationOnly {
		r.syncer.OnApplied(r.onRevalidationOnly)
	} else {
		r.syncer.OnApplied(a.invalidateAfterPolicyChange)
	}
	r.setPolicy(openShare())
	return r
}

func (r *trafficRig) inVswitchdNetns(f func() error) {
	r.t.Helper()
	path := fmt.Sprintf("/proc/%d/ns/net", r.rig.VswitchdPID())
	if err := ns.WithNetNSPath(path, func(ns.NetNS) error { return f() }); err != nil {
		r.t.Fatal(err)
	}
}

// setPolicy makes share the node's policy and syncs it as the agent does: when this
// returns, the agent would report it realized.
func (r *trafficRig) setPolicy(share policy.NodeShare) {
	r.t.Helper()
	r.gen++
	share.Generation = r.gen
	r.state.SetPolicy(share)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	r.syncer.sync(ctx, false)
	want := r.state.Generation()
	if synced, err := r.syncer.Synced(); synced != want || err != nil {
		r.t.Fatalf("policy generation %d: node generation %d synced (%v), want %d", r.gen, synced, err, want)
	}
}

// openShare lists every pod and isolates none.
func openShare() policy.NodeShare {
	s := policy.NewNodeShare("node-1")
	for _, p := range trafficPods {
		s.Pods = append(s.Pods, podKey(p.Name))
	}
	slices.SortFunc(s.Pods, policy.PodKey.Compare)
	return s
}

// cShare isolates c's ingress and allows it from peers (nil: any peer) on ports (none:
// any port); no rule at all when rule is false.
func cShare(rule bool, peers []string, ports ...policy.Port) policy.NodeShare {
	s := openShare()
	s.AppliedToSets["g-np"] = policy.AppliedToSet{ID: "g-np", Pods: []policy.AppliedPod{podRef("c", 12)}}
	s.Isolation.Ingress = []policy.PodKey{podKey("c")}
	if !rule {
		return s
	}
	var sets []string
	if peers != nil {
		var addrs []string
		for _, name := range peers {
			addrs = append(addrs, fmt.Sprintf("10.244.1.%d", 10+strings.Index("abcd", name)))
		}
		s.AddressSets["s-peers"] = policy.AddressSet{ID: "s-peers", Addresses: hostPrefixes(addrs...)}
		sets = []string{"s-peers"}
	}
	rule0 := ingressRule("x/np/ingress/0", sets, ports...)
	s.Rules[rule0.ID] = rule0
	return s
}

// udpFrame is an Ethernet frame with a UDP datagram (no checksum) from pod src to pod dst
// through the gateway, as a pod sends it.
func udpFrame(src, dst pipeline.PodPort, sport, dport uint16) []byte {
	f := ipv4Frame(src, dst, 17, 8+16)
	udp := f[34:]
	binary.BigEndian.PutUint16(udp[0:], sport)
	binary.BigEndian.PutUint16(udp[2:], dport)
	binary.BigEndian.PutUint16(udp[4:], uint16(len(udp)))
	return f
}

// ipv4Frame is an Ethernet frame with an IPv4 header (checksummed) of protocol proto from
// pod src to pod dst through the gateway, and l4 zero bytes after it.
func ipv4Frame(src, dst pipeline.PodPort, proto uint8, l4 int) []byte {
	f := make([]byte, 14+20+l4)
	copy(f[0:6], testNodeConfig().GatewayMAC)
	copy(f[6:12], src.MAC)
	binary.BigEndian.PutUint16(f[12:], 0x0800)
	ip := f[14:34]
	ip[0], ip[8], ip[9] = 0x45, 64, proto
	binary.BigEndian.PutUint16(ip[2:], uint16(len(f)-14))
	s4, d4 := src.IPs[0].As4(), dst.IPs[0].As4()
	copy(ip[12:], s4[:])
	copy(ip[16:], d4[:])
	binary.BigEndian.PutUint16(ip[10:], ^onesSum(ip))
	return f
}

// onesSum is the ones' complement sum of b's 16-bit words (the Internet checksum, not
// inverted).
func onesSum(b []byte) uint16 {
	var sum uint32
	for i := 0; i+1 < len(b); i += 2 {
		sum += uint32(binary.BigEndian.Uint16(b[i:]))
	}
	for sum>>16 != 0 {
		sum = sum&0xffff + sum>>16
	}
	return uint16(sum)
}

// listener receives what br-int sends out of one pod's port.
type listener struct{ fd int }

func (r *trafficRig) listen(pod string) *listener {
	r.t.Helper()
	var l listener
	r.inVswitchdNetns(func() error {
		link, err := netlink.LinkByName("p" + pod)
		if err != nil {
			return err
		}
		fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW, int(htons(unix.ETH_P_IP)))
		if err != nil {
			return err
		}
		if err := unix.Bind(fd, &unix.SockaddrLinklayer{Protocol: htons(unix.ETH_P_IP), Ifindex: link.Attrs().Index}); err != nil {
			unix.Close(fd)
			return err
		}
		l.fd = fd
		return nil
	})
	r.t.Cleanup(func() { unix.Close(l.fd) })
	return &l
}

func htons(v uint16) uint16 { return v<<8 | v>>8 }

// got reports whether a UDP datagram from sport arrives within wait (outgoing copies
// ignored).
func (l *listener) got(sport uint16, wait time.Duration) bool {
	deadline := time.Now().Add(wait)
	buf := make([]byte, 2048)
	for {
		left := time.Until(deadline)
		if left <= 0 {
			return false
		}
		tv := unix.NsecToTimeval(left.Nanoseconds())
		if err := unix.SetsockoptTimeval(l.fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv); err != nil {
			return false
		}
		n, from, err := unix.Recvfrom(l.fd, buf, 0)
		if err != nil {
			continue
		}
		if ll, ok := from.(*unix.SockaddrLinklayer); ok && ll.Pkttype == unix.PACKET_OUTGOING {
			continue
		}
		// Ethernet 14 + IPv4 20 (no options): the UDP source port.
		if n >= 14+20+8 && buf[14+9] == 17 && binary.BigEndian.Uint16(buf[34:]) == sport {
			return true
		}
	}
}

// send sends one datagram from src to dst, from a source port no datagram used before
// (a new connection for conntrack), and returns that port.
func (r *trafficRig) send(src, dst string, dport uint16) uint16 {
	r.t.Helper()
	r.sport++
	sport := r.sport
	r.sendFrom(src, dst, sport, dport)
	return sport
}

func (r *trafficRig) sendFrom(src, dst string, sport, dport uint16) {
	r.t.Helper()
	r.sendFrame(src, udpFrame(r.pods[src], r.pods[dst], sport, dport))
}

// sendFrame sends an Ethernet frame from pod src's port.
func (r *trafficRig) sendFrame(src string, frame []byte) {
	r.t.Helper()
	r.inVswitchdNetns(func() error {
		link, err := netlink.LinkByName("p" + src)
		if err != nil {
			return err
		}
		fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW, 0)
		if err != nil {
			return err
		}
		defer unix.Close(fd)
		addr := &unix.SockaddrLinklayer{Ifindex: link.Attrs().Index, Halen: 6}
		copy(addr.Addr[:], testNodeConfig().GatewayMAC)
		return unix.Sendto(fd, frame, 0, addr)
	})
}

// datapathFlows are the datapath's flows whose line holds every one of parts, by ufid,
// with their packet counts: read from the datapath itself (dpctl/dump-flows), not from
// OpenFlow counters a revalidator round has yet to credit.
func (r *trafficRig) datapathFlows(parts ...string) map[string]int {
	r.t.Helper()
	flows := map[string]int{}
	packets := regexp.MustCompile(`packets:(\d+)`)
lines:
	for _, line := range strings.Split(r.rig.Appctl(r.t, "dpctl/dump-flows", "-m"), "\n") {
		for _, p := range parts {
			if !strings.Contains(line, p) {
				continue lines
			}
		}
		f := strings.Fields(line)
		m := packets.FindStringSubmatch(line)
		if len(f) == 0 || !strings.HasPrefix(f[0], "ufid:") || m == nil {
			continue
		}
		n, _ := strconv.Atoi(m[1])
		flows[strings.TrimSuffix(f[0], ",")] = n
	}
	return flows
}

// dropsTo are the datapath's drop flows of packets to pod, with their packet counts.
func (r *trafficRig) dropsTo(pod string) map[string]int {
	return r.datapathFlows("dst="+r.pods[pod].IPs[0].String()+",", "actions:drop")
}

// droppedBy reports whether the datapath dropped a packet from sport to pod since it held
// the drop flows before: a drop flow of before counted one more packet, or a new one was
// installed for this very packet (an upcall's packet is not counted in its flow; the
// flow's key, masked or not, shows the packet's source port).
func (r *trafficRig) droppedBy(pod string, sport uint16, before map[string]int) bool {
	after := r.dropsTo(pod)
	for ufid, n := range after {
		if n > before[ufid] {
			return true
		}
	}
	for ufid := range r.datapathFlows("dst="+r.pods[pod].IPs[0].String()+",", fmt.Sprintf("udp(src=%d/", sport), "actions:drop") {
		if _, old := before[ufid]; !old {
			return true
		}
	}
	return false
}

// probe sends one new connection from src to dst and says whether it passed, on
// evidence either way: the datagram arrives at dst's port, or the datapath dropped it
// (droppedBy) and it does not arrive.
func (r *trafficRig) probe(src, dst string, dport uint16, l *listener) (passed bool, evidence string) {
	r.t.Helper()
	drops := r.dropsTo(dst)
	sport := r.send(src, dst, dport)
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); {
		if l.got(sport, 20*time.Millisecond) {
			return true, fmt.Sprintf("datagram from port %d arrived at %s", sport, dst)
		}
		if r.droppedBy(dst, sport, drops) {
			if l.got(sport, 100*time.Millisecond) {
				r.t.Fatalf("%s -> %s from port %d: dropped by the datapath and arrived", src, dst, sport)
			}
			return false, fmt.Sprintf("the datapath dropped the datagram from port %d to %s", sport, dst)
		}
	}
	r.t.Fatalf("%s -> %s from port %d: neither arrived nor dropped by the datapath within 5s: no verdict\n%s",
		src, dst, sport, r.rig.Appctl(r.t, "dpctl/dump-flows", "-m"))
	return false, ""
}

// A policy change is in force on the very next packet once the agent reports it
// realized: a new connection the new policy denies is dropped, one it allows passes,
// after each of the changes the truth tables once saw outlive their rules without the
// purge (an allow's peer clause removed, its port changed, a deny added and removed), with
// a datapath flow of the old verdict in place for the same pair just before the change.
// Established connections are never cut (policy is stateful): a flow of d's that started
// before any policy keeps passing. Seen failing with ovs-vswitchd's revalidators paused
// (revalidator/pause) and the agent's invalidation switched off: the stale allow let the
// first connection after "the peer clause now holds a only" through. Run with each
// --datapath-invalidation.
func TestPolicyChangeIsInForceOnTheNextPacket(t *testing.T) {
	for _, mode := range []string{DatapathInvalidationPurge, DatapathInvalidationNarrow} {
		t.Run(mode, func(t *testing.T) { policyChangeIsInForceOnTheNextPacket(t, mode) })
	}
}

func policyChangeIsInForceOnTheNextPacket(t *testing.T, mode string) {
	r := newTrafficRig(t, mode)
	c := r.listen("c")
	http := policy.Port{Protocol: policy.UDP, Port: 80}
	steps := []struct {
		name  string
		share policy.NodeShare
		pass  bool
	}{
		{"c isolated, d allowed on 80", cShare(true, []string{"d"}, http), true},
		{"the peer clause now holds a only", cShare(true, []string{"a"}, http), false},
		{"a and d", cShare(true, []string{"a", "d"}, http), true},
		{"port 81 only", cShare(true, []string{"a", "d"}, policy.Port{Protocol: policy.UDP, Port: 81}), false},
		{"any peer on 80", cShare(true, nil, http), true},
		{"c isolated, no rule", cShare(false, nil), false},
		{"no policy", openShare(), true},
	}
	established := r.send("d", "c", 80) // before any policy: open
	if !c.got(established, 2*time.Second) {
		t.Fatal("d -> c with no policy did not arrive")
	}
	r.sendFrom("c", "d", 80, established) // c answers: established both ways
	prev := true
	for round := range 2 {
		for _, st := range steps {
			// Warm the datapath with the old verdict for this pair.
			if before, evidence := r.probe("d", "c", 80, c); before != prev {
				t.Fatalf("round %d, before %q: d -> c passed=%v, want %v (%s)", round, st.name, before, prev, evidence)
			}
			prev = st.pass
			r.setPolicy(st.share)
			if passed, evidence := r.probe("d", "c", 80, c); passed != st.pass {
				t.Errorf("round %d, %q: the first new connection d -> c passed=%v, want %v (%s)\ndatapath:\n%s",
					round, st.name, passed, st.pass, evidence, r.rig.Appctl(t, "dpctl/dump-flows"))
			}
			r.sendFrom("d", "c", established, 80)
			if !c.got(established, 2*time.Second) {
				t.Errorf("round %d, %q: d's established flow to c was cut", round, st.name)
			}
		}
	}
}

// A policy change leaves the datapath flows of established connections alone: they skip
// policy (NetworkPolicy is stateful), so no change of it can change what they do, and
// dropping them (revalidator/purge did, for every flow of ovs-vswitchd) sends the traffic
// of every established connection on the node through upcalls again. Checked on the
// datapath itself: the flows that carried d's established connection to c before the
// change, by UFID, are still there after it, and carry its next packet. Seen failing with
// the purge after every policy change (the flows were gone), which is why it runs with
// --datapath-invalidation=narrow only (the default; purge drops them).
func TestPolicyChangeKeepsEstablishedDatapathFlows(t *testing.T) {
	r := newTrafficRig(t, DatapathInvalidationNarrow)
	c := r.listen("c")
	established := r.send("d", "c", 80)
	if !c.got(established, 2*time.Second) {
		t.Fatal("d -> c with no policy did not arrive")
	}
	r.sendFrom("c", "d", 80, established) // c answers: established both ways
	r.sendFrom("d", "c", established, 80)
	if !c.got(established, 2*time.Second) {
		t.Fatal("d's established flow to c did not arrive")
	}
	before := r.establishedTo("c")
	if len(before) == 0 {
		t.Fatalf("no datapath flow of d's established connection to c: nothing to check\n%s", r.rig.Appctl(t, "dpctl/dump-flows", "-m"))
	}
	for i, st := range []policy.NodeShare{cShare(true, []string{"d"}, policy.Port{Protocol: policy.UDP, Port: 80}), cShare(false, nil), openShare()} {
		r.setPolicy(st)
		after := r.establishedTo("c")
		for ufid := range before {
			if !after[ufid] {
				t.Fatalf("change %d: the datapath flow %s of d's established connection to c is gone after the policy change\ndatapath now:\n%s",
					i, ufid, r.rig.Appctl(t, "dpctl/dump-flows", "-m"))
			}
		}
		r.sendFrom("d", "c", established, 80)
		if !c.got(established, 2*time.Second) {
			t.Fatalf("change %d: d's established flow to c was cut", i)
		}
	}
}

// parsedDatapathFlows are the switch's datapath flows now, parsed (dpctl/dump-flows -m).
func (r *trafficRig) parsedDatapathFlows() []ovs.DatapathFlow {
	r.t.Helper()
	flows, err := ovs.ParseDatapathFlows(r.rig.Appctl(r.t, "dpctl/dump-flows", "-m"))
	if err != nil {
		r.t.Fatal(err)
	}
	return flows
}

// establishedTo is the UFIDs of the datapath flows that deliver a connection's later
// packets to pod: after conntrack (recirc_id not 0), output to its port, without the
// commit of a new connection.
func (r *trafficRig) establishedTo(pod string) map[string]bool {
	r.t.Helper()
	flows := r.parsedDatapathFlows()
	dst := "dst=" + r.pods[pod].IPs[0].String() + ","
	ufids := map[string]bool{}
	for _, f := range flows {
		if strings.Contains(f.Key, dst) && !strings.Contains(f.Key, "recirc_id(0),") &&
			!strings.Contains(f.Actions, "ct(commit") && strings.HasSuffix(strings.Split(f.Actions, ", ")[0], ",p"+pod) {
			ufids[f.UFID] = true
		}
	}
	return ufids
}
