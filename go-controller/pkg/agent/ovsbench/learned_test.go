package ovsbench

import (
	"context"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"net"
	"net/netip"
	"os"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/kovs-net/kovs/go-controller/pkg/agent"
	"github.com/kovs-net/kovs/go-controller/pkg/ovs"
	"github.com/kovs-net/kovs/go-controller/pkg/ovs/ovstest"
	"github.com/kovs-net/kovs/go-controller/pkg/pipeline"
)

// associationsEnv scales the learned-flow benchmark: how many distinct SCTP associations
// it opens (default 100,000; make bench-once, which runs every benchmark once to keep it
// from rotting, sets a few thousand: ovs-vswitchd learns about a thousand flows a second
// on the test machines).
const associationsEnv = "KOVS_BENCH_SCTP_ASSOCIATIONS"

// learnedScale is the number of associations and the bounded case's limit per learned
// table: a fifth of them, so the bound is what is measured (the agent's default, 32,768,
// is the same shape).
func learnedScale(b *testing.B) (associations, limit int) {
	associations = 100_000
	if v := os.Getenv(associationsEnv); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 100 {
			b.Fatalf("%s=%q: want a number of associations, at least 100", associationsEnv, v)
		}
		associations = n
	}
	return associations, associations / 5
}

// BenchmarkLearnedFlowsBounded is issue 14's learned-flow growth: one local pod opens
// 100,000 distinct SCTP associations (KOVS_BENCH_SCTP_ASSOCIATIONS) (INIT chunks to 2 peer pods from 50,000 source
// ports, sent through br-int of a real ovs-vswitchd, which learns one SCTPReply flow per
// association), then the agent runs a full resync.
//
//   - unbounded: br-int as before issue 14: no Flow_Table limit, and the resync dumps
//     every flow, learned ones included (the baseline);
//   - bounded: the agent's limits (LearnedTableLimits, here a fifth of the associations
//     per table, evicting) and its resync, which asks the switch for installed flows
//     only.
//
// Reported: learned-flows (SCTPReply's flows after the associations), resync-flows (the
// flows the resync read from the switch), resync-MB (Go memory allocated by that resync),
// ms-resync, and vswitchd-MB (ovs-vswitchd's resident memory). Needs root and OVS.
func BenchmarkLearnedFlowsBounded(b *testing.B) {
	for _, bounded := range []bool{false, true} {
		name := map[bool]string{false: "unbounded", true: "bounded"}[bounded]
		b.Run(name, func(b *testing.B) {
			for b.Loop() {
				benchLearned(b, bounded)
			}
		})
	}
}

func benchLearned(b *testing.B, bounded bool) {
	associations, limit := learnedScale(b)
	rig, of, db := startLearnedBrInt(b, bounded, limit)
	pod := localPod(0)
	pod.OFPort = 3
	state := agent.NewNodeState(1, nil)
	state.SetNode(nodeConfig())
	state.SetPod("p0", pod)
	state.SetPeers(tunnelPeers())
	sw := &countingSwitch{FlowSwitch: agent.OpenFlowSwitch(of), of: of, all: !bounded}
	syncer := agent.NewFlowSyncer(sw, state.Desired, time.Hour)
	synced := make(chan struct{}, 1)
	syncer.OnSynced(func(uint64) {
		select {
		case synced <- struct{}{}:
		default:
		}
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	defer func() { cancel(); <-done }()
	go func() { defer close(done); syncer.Run(ctx) }()
	waitSynced(b, synced)
	if _, err := db.EnsurePort(ctx, "br-int", ovs.PortSpec{Name: "p0", Type: ovs.PortTypeInternal, OfportRequest: 3}); err != nil {
		b.Fatal(err)
	}
	if err := sendAssociations(rig, pod, tunnelPeers(), associations); err != nil {
		b.Fatal(err)
	}
	learned := waitLearned(b, rig, associations)

	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	start := time.Now()
	syncer.TriggerFull()
	waitSynced(b, synced)
	took := time.Since(start)
	runtime.ReadMemStats(&after)
	if _, err := syncer.Synced(); err != nil {
		b.Fatalf("full resync: %v", err)
	}
	b.ReportMetric(float64(learned), "learned-flows")
	b.ReportMetric(float64(sw.read), "resync-flows")
	b.ReportMetric(float64(after.TotalAlloc-before.TotalAlloc)/(1<<20), "resync-MB")
	b.ReportMetric(ms(took), "ms-resync")
	b.ReportMetric(float64(residentKB(b, rig.VswitchdPID()))/1024, "vswitchd-MB")
	b.Logf("%d associations: SCTPReply holds %d learned flows; the full resync read %d flows in %s, allocating %.1f MB",
		associations, learned, sw.read, took.Round(time.Millisecond), float64(after.TotalAlloc-before.TotalAlloc)/(1<<20))
	if bounded && learned > limit {
		b.Errorf("SCTPReply holds %d flows, over its limit of %d", learned, limit)
	}
}

// startLearnedBrInt is br-int as the agent creates it, with the agent's learned-table
// limits when bounded.
func startLearnedBrInt(b *testing.B, bounded bool, limit int) (*ovstest.Rig, *ovs.OpenFlow, *ovs.OVSDB) {
	rig, of := startBrInt(b)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	db, err := ovs.NewOVSDB(context.Background(), rig.Endpoint())
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(db.Close)
	if bounded {
		if err := db.LimitFlowTables(ctx, "br-int", agent.LearnedTableLimits(limit)); err != nil {
			b.Fatal(err)
		}
	}
	return rig, of, db
}

// countingSwitch counts the flows a resync reads; all makes it read every flow, as the
// agent did before issue 14.
type countingSwitch struct {
	agent.FlowSwitch
	of   *ovs.OpenFlow
	all  bool
	read int
}

func (s *countingSwitch) Flows(ctx context.Context) ([]ovs.Flow, error) {
	if !s.all {
		flows, err := s.FlowSwitch.Flows(ctx)
		s.read = len(flows)
		return flows, err
	}
	entries, err := s.of.DumpFlows(ctx, 0, 0)
	if err != nil {
		return nil, err
	}
	out := make([]ovs.Flow, len(entries))
	for i, e := range entries {
		if out[i], err = e.Flow(); err != nil {
			return nil, err
		}
	}
	s.read = len(out)
	return out, nil
}

func waitSynced(b *testing.B, synced <-chan struct{}) {
	select {
	case <-synced:
	case <-time.After(syncTimeout):
		b.Fatalf("no flow sync within %s", syncTimeout)
	}
}

// sendAssociations sends n SCTP INIT chunks from pod (port p0 in ovs-vswitchd's network
// namespace) to the peers' first pods, each from its own source port: n associations.
func sendAssociations(rig *ovstest.Rig, pod pipeline.PodPort, peers []pipeline.TunnelPeer, n int) error {
	netnsPath := fmt.Sprintf("/proc/%d/ns/net", rig.VswitchdPID())
	return ns.WithNetNSPath(netnsPath, func(ns.NetNS) error {
		link, err := netlink.LinkByName("p0")
		if err != nil {
			return err
		}
		// The tap's queue holds every packet until ovs-vswitchd reads it: none is lost.
		if err := netlink.LinkSetTxQLen(link, n+1024); err != nil {
			return err
		}
		if err := netlink.LinkSetUp(link); err != nil {
			return err
		}
		fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW, 0)
		if err != nil {
			return err
		}
		defer unix.Close(fd)
		if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_SNDBUF, 4<<20); err != nil {
			return err
		}
		addr := &unix.SockaddrLinklayer{Ifindex: link.Attrs().Index, Halen: 6}
		gw := nodeConfig().GatewayMAC
		copy(addr.Addr[:], gw)
		var dsts []netip.Addr
		for _, p := range peers {
			if a := p.PodSubnets[0].Addr(); a.Is4() {
				dsts = append(dsts, a.Next().Next())
			}
		}
		for i := range n {
			dst := dsts[i%len(dsts)]
			sport := uint16(10000 + (i/len(dsts))%50000)
			frame := sctpInit(pod.MAC, gw, pod.IPs[0], dst, sport, 9000)
			for {
				err := unix.Sendto(fd, frame, 0, addr)
				if err == unix.ENOBUFS || err == unix.EAGAIN {
					time.Sleep(time.Millisecond)
					continue
				}
				if err != nil {
					return fmt.Errorf("send association %d: %w", i, err)
				}
				break
			}
		}
		return nil
	})
}

// sctpInit is an Ethernet frame with an SCTP INIT chunk (a new association's first
// packet), CRC32c checksum included.
func sctpInit(src, dst net.HardwareAddr, from, to netip.Addr, sport, dport uint16) []byte {
	f := make([]byte, 14+20+12+20)
	copy(f[0:6], dst)
	copy(f[6:12], src)
	binary.BigEndian.PutUint16(f[12:], 0x0800)
	ip := f[14:34]
	ip[0], ip[8], ip[9] = 0x45, 64, 132
	binary.BigEndian.PutUint16(ip[2:], uint16(len(f)-14))
	s4, d4 := from.As4(), to.As4()
	copy(ip[12:], s4[:])
	copy(ip[16:], d4[:])
	var sum uint32
	for i := 0; i < 20; i += 2 {
		sum += uint32(binary.BigEndian.Uint16(ip[i:]))
	}
	for sum>>16 != 0 {
		sum = sum&0xffff + sum>>16
	}
	binary.BigEndian.PutUint16(ip[10:], ^uint16(sum))
	sctp := f[34:]
	binary.BigEndian.PutUint16(sctp[0:], sport)
	binary.BigEndian.PutUint16(sctp[2:], dport)
	chunk := sctp[12:]
	chunk[0] = 1 // INIT
	binary.BigEndian.PutUint16(chunk[2:], 20)
	binary.BigEndian.PutUint32(chunk[4:], uint32(sport)<<16|1) // initiate tag
	binary.BigEndian.PutUint32(chunk[8:], 65535)               // a_rwnd
	binary.BigEndian.PutUint16(chunk[12:], 1)                  // outbound streams
	binary.BigEndian.PutUint16(chunk[14:], 1)                  // inbound streams
	binary.BigEndian.PutUint32(chunk[16:], 1)                  // initial TSN
	binary.LittleEndian.PutUint32(sctp[8:], crc32.Checksum(sctp, crc32.MakeTable(crc32.Castagnoli)))
	return f
}

// waitLearned waits until br-int has received all sent packets from the pod's port and
// SCTPReply's flow count has stopped growing, and returns that count.
func waitLearned(b *testing.B, rig *ovstest.Rig, sent int) int {
	deadline := time.Now().Add(10 * time.Minute)
	for portRxPackets(b, rig, 3) < sent {
		if time.Now().After(deadline) {
			b.Fatalf("br-int received %d of the %d packets sent within 10 minutes", portRxPackets(b, rig, 3), sent)
		}
		time.Sleep(500 * time.Millisecond)
	}
	last, stable := -1, 0
	for ; time.Now().Before(deadline); time.Sleep(500 * time.Millisecond) {
		n := tableFlows(b, rig, pipeline.SCTPReply.ID)
		if n != last {
			last, stable = n, 0
			continue
		}
		if stable++; stable >= 4 {
			return n
		}
	}
	b.Fatalf("SCTPReply still growing after 10 minutes (%d flows)", last)
	return 0
}

// tableFlows is the number of flows in table id (dump-aggregate, which the switch counts
// itself), the table's miss flow included.
func tableFlows(b *testing.B, rig *ovstest.Rig, id uint8) int {
	out := rig.Ofctl(b, "dump-aggregate", "br-int", "table="+strconv.Itoa(int(id)))
	_, rest, ok := strings.Cut(out, "flow_count=")
	if !ok {
		b.Fatalf("dump-aggregate: %s", out)
	}
	n, err := strconv.Atoi(strings.Fields(rest)[0])
	if err != nil {
		b.Fatalf("dump-aggregate: %s", out)
	}
	return n
}

// portRxPackets is how many packets br-int received on port (dump-ports).
func portRxPackets(b *testing.B, rig *ovstest.Rig, port int) int {
	out := rig.Ofctl(b, "dump-ports", "br-int", strconv.Itoa(port))
	_, rest, ok := strings.Cut(out, "rx pkts=")
	if !ok {
		b.Fatalf("dump-ports: %s", out)
	}
	n, err := strconv.Atoi(strings.TrimRight(strings.Fields(rest)[0], ","))
	if err != nil {
		b.Fatalf("dump-ports: %s", out)
	}
	return n
}

// residentKB is the process's resident memory (VmRSS), in KiB.
func residentKB(b *testing.B, pid int) int {
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		b.Fatal(err)
	}
	for _, line := range strings.Split(string(status), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "VmRSS:" {
			kb, _ := strconv.Atoi(f[1])
			return kb
		}
	}
	return 0
}
