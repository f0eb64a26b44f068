package integration

import (
	"context"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/kovs-net/kovs/go-controller/pkg/ovs"
	"github.com/kovs-net/kovs/go-controller/pkg/ovs/ovstest"
)

// TestConntrackDumpAndFlushByFrontendAndBackend checks DumpConntrack and
// FlushConntrackFlows against ovs-vswitchd 3.x's userspace conntrack: packet-outs commit
// UDP connections to a frontend (a ClusterIP:port), translated to two backends or not
// translated at all (a Service without endpoints); a flush by frontend and backend removes
// exactly the connections answered by that backend, in that zone, of that family.
func TestConntrackDumpAndFlushByFrontendAndBackend(t *testing.T) {
	rig := ovstest.Start(t)
	rig.Vsctl(t, "add-br", "br-int", "--", "set", "bridge", "br-int", "datapath_type=netdev", "fail_mode=secure")
	const zone, other = 65520, 7
	vip, vip6 := netip.MustParseAddrPort("10.96.0.10:80"), netip.MustParseAddrPort("[fd00:96::10]:80")
	// The source port chooses the translation (and the zone).
	for _, f := range []string{
		fmt.Sprintf("priority=10,udp,tp_src=40000,actions=ct(commit,zone=%d,nat(dst=10.244.2.10:8080))", zone),
		fmt.Sprintf("priority=10,udp,tp_src=40001,actions=ct(commit,zone=%d,nat(dst=10.244.2.10:8080))", zone),
		fmt.Sprintf("priority=10,udp,tp_src=40002,actions=ct(commit,zone=%d,nat(dst=10.244.3.10:8080))", zone),
		fmt.Sprintf("priority=10,udp,tp_src=40003,actions=ct(commit,zone=%d)", zone),
		fmt.Sprintf("priority=10,udp,tp_src=40004,actions=ct(commit,zone=%d,nat(dst=10.244.2.10:8080))", other),
		fmt.Sprintf("priority=10,udp6,tp_src=40000,actions=ct(commit,zone=%d,nat(dst=[fd00::10]:8080))", zone),
	} {
		rig.Ofctl(t, "add-flow", "br-int", f)
	}
	client, client6 := netip.MustParseAddr("10.244.1.5"), netip.MustParseAddr("fd00::5")
	send := func(src netip.AddrPort, dst netip.AddrPort) {
		rig.Ofctl(t, "packet-out", "br-int", "in_port=controller packet="+udpFrame(src, dst)+" actions=resubmit(,0)")
	}
	for _, sport := range []uint16{40000, 40001, 40002, 40003, 40004} {
		send(netip.AddrPortFrom(client, sport), vip)
	}
	send(netip.AddrPortFrom(client6, 40000), vip6)

	v := ovs.NewVswitchd(ovs.VswitchdConfig{Ctl: rig.VswitchdCtl, RunDir: rig.Dir})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	sources := func() []string {
		t.Helper()
		entries, err := v.DumpConntrack(ctx, zone)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, e := range entries {
			if e.Zone != zone || e.IPProto != 17 {
				t.Errorf("dump of zone %d holds %+v", zone, e)
			}
			out = append(out, e.Orig.Src.String()+">"+e.Reply.Src.String())
		}
		slices.Sort(out)
		return out
	}
	want := []string{"10.244.1.5:40000>10.244.2.10:8080", "10.244.1.5:40001>10.244.2.10:8080",
		"10.244.1.5:40002>10.244.3.10:8080", "10.244.1.5:40003>10.96.0.10:80", "[fd00::5]:40000>[fd00::10]:8080"}
	if got := sources(); !slices.Equal(got, want) {
		t.Fatalf("zone %d holds %v, want %v", zone, got, want)
	}

	flush := func(front, back netip.AddrPort) {
		t.Helper()
		if err := v.FlushConntrackFlows(ctx, ovs.ConntrackFlows{Zone: zone, IPProto: 17, OrigDst: front, ReplySrc: back}); err != nil {
			t.Fatal(err)
		}
	}
	flush(vip, netip.MustParseAddrPort("10.244.2.10:8080"))
	want = []string{"10.244.1.5:40002>10.244.3.10:8080", "10.244.1.5:40003>10.96.0.10:80", "[fd00::5]:40000>[fd00::10]:8080"}
	if got := sources(); !slices.Equal(got, want) {
		t.Fatalf("after flushing %s answered by 10.244.2.10:8080: zone %d holds %v, want %v", vip, zone, got, want)
	}
	flush(vip, vip) // the untranslated connection (no endpoints when it began)
	flush(vip6, netip.MustParseAddrPort("[fd00::10]:8080"))
	flush(vip, netip.MustParseAddrPort("10.244.9.9:8080")) // nothing to flush: no error
	want = []string{"10.244.1.5:40002>10.244.3.10:8080"}
	if got := sources(); !slices.Equal(got, want) {
		t.Fatalf("after the flushes: zone %d holds %v, want %v", zone, got, want)
	}
	others, err := v.DumpConntrack(ctx, other)
	if err != nil {
		t.Fatal(err)
	}
	if len(others) != 1 {
		t.Errorf("zone %d holds %v, want its one connection left alone by flushes of zone %d", other, others, zone)
	}
}

// udpFrame is an Ethernet frame of one UDP datagram from src to dst, checksums right (the
// userspace conntrack marks a packet with a bad L4 checksum invalid), in hex.
func udpFrame(src, dst netip.AddrPort) string {
	payload := []byte("x")
	udp := binary.BigEndian.AppendUint16(nil, src.Port())
	udp = binary.BigEndian.AppendUint16(udp, dst.Port())
	udp = binary.BigEndian.AppendUint16(udp, uint16(8+len(payload)))
	udp = append(udp, 0, 0)
	udp = append(udp, payload...)
	s, d := src.Addr().AsSlice(), dst.Addr().AsSlice()
	pseudo := slices.Concat(s, d)
	frame := []byte{0x0a, 0x58, 0, 0, 0, 2, 0x0a, 0x58, 0, 0, 0, 1}
	var ip []byte
	if src.Addr().Is4() {
		pseudo = append(pseudo, 0, 17)
		pseudo = binary.BigEndian.AppendUint16(pseudo, uint16(len(udp)))
		ip = []byte{0x45, 0, 0, 0, 0, 0, 0, 0, 64, 17, 0, 0}
		binary.BigEndian.PutUint16(ip[2:], uint16(20+len(udp)))
		ip = slices.Concat(ip, s, d)
		binary.BigEndian.PutUint16(ip[10:], checksum(ip))
		frame = append(frame, 0x08, 0x00)
	} else {
		pseudo = binary.BigEndian.AppendUint32(pseudo, uint32(len(udp)))
		pseudo = append(pseudo, 0, 0, 0, 17)
		ip = []byte{0x60, 0, 0, 0, 0, 0, 17, 64}
		binary.BigEndian.PutUint16(ip[4:], uint16(len(udp)))
		ip = slices.Concat(ip, s, d)
		frame = append(frame, 0x86, 0xdd)
	}
	binary.BigEndian.PutUint16(udp[6:], checksum(slices.Concat(pseudo, udp)))
	return hex.EncodeToString(slices.Concat(frame, ip, udp))
}

func checksum(b []byte) uint16 {
	var sum uint32
	for i := 0; i+1 < len(b); i += 2 {
		sum += uint32(binary.BigEndian.Uint16(b[i:]))
	}
	if len(b)%2 == 1 {
		sum += uint32(b[len(b)-1]) << 8
	}
	for sum>>16 != 0 {
		sum = sum&0xffff + sum>>16
	}
	return ^uint16(sum)
}
