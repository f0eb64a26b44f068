package pipeline

import (
	"net"
	"net/netip"
	"slices"
	"strings"
	"testing"
)

// tcpPacket is a first TCP packet from src to dst, with TTL 64.
func tcpPacket(inPort uint32, srcMAC, dstMAC net.HardwareAddr, src, dst netip.Addr) Packet {
	p := Packet{
		InPort: inPort, EthSrc: srcMAC, EthDst: dstMAC, EthType: EthTypeIPv4,
		IPSrc: src, IPDst: dst, IPProto: IPProtoTCP, TTL: 64, SrcPort: 40000, DstPort: 8080,
	}
	if src.Is6() {
		p.EthType = EthTypeIPv6
	}
	return p
}

// podIP is pod's address of dst's family.
func podIP(t *testing.T, pod PodPort, ipv6 bool) netip.Addr {
	t.Helper()
	for _, a := range pod.IPs {
		if a.Is6() == ipv6 {
			return a
		}
	}
	t.Fatalf("pod %s has no address of that family", pod)
	return netip.Addr{}
}

// fromPod is a packet pod sends to dst through its gateway.
func fromPod(t *testing.T, pod PodPort, node NodeConfig, dst netip.Addr) Packet {
	t.Helper()
	return tcpPacket(pod.OFPort, pod.MAC, node.GatewayMAC, podIP(t, pod, dst.Is6()), dst)
}

// fromTunnel is p as it arrives on the tunnel port of the receiving node.
func fromTunnel(p Packet, tunSrc netip.Addr) Packet {
	p.InPort = tunnelPort
	p.TunSrc = tunSrc
	p.TunDst = netip.Addr{}
	return p
}

func arpRequest(inPort uint32, sha net.HardwareAddr, spa, tpa netip.Addr) Packet {
	return Packet{
		InPort: inPort, EthSrc: sha, EthDst: mac("ff:ff:ff:ff:ff:ff"), EthType: EthTypeARP,
		ARPOp: arpOpRequest, ARPSha: sha, ARPSpa: spa, ARPTpa: tpa, ARPTha: noLinkLayer(),
	}
}

// solicitedNode is the solicited-node multicast address of target.
func solicitedNode(target netip.Addr) netip.Addr {
	b := target.As16()
	return netip.AddrFrom16([16]byte{0xff, 0x02, 11: 0x01, 12: 0xff, 13: b[13], 14: b[14], 15: b[15]})
}

// neighborSolicit is a multicast NS for target from src, with a source link-layer option.
func neighborSolicit(inPort uint32, srcMAC net.HardwareAddr, src, target netip.Addr) Packet {
	return Packet{
		InPort: inPort, EthSrc: srcMAC, EthDst: mac("33:33:ff:00:00:01"), EthType: EthTypeIPv6,
		IPSrc: src, IPDst: solicitedNode(target), IPProto: IPProtoICMP6, TTL: 255,
		ICMPType: ndNeighborSolicit, NDTarget: target, NDSLL: srcMAC, NDOptionsType: ndOptionSourceLL,
	}
}

// neighborAdvert is a solicited NA for target from src to dst, with a target link-layer option.
func neighborAdvert(inPort uint32, srcMAC, dstMAC net.HardwareAddr, src, dst, target netip.Addr) Packet {
	return Packet{
		InPort: inPort, EthSrc: srcMAC, EthDst: dstMAC, EthType: EthTypeIPv6,
		IPSrc: src, IPDst: dst, IPProto: IPProtoICMP6, TTL: 255, ICMPType: ndNeighborAdvert,
		NDTarget: target, NDTLL: srcMAC, NDOptionsType: ndOptionTargetLL, NDReserved: naSolicited | naOverride,
	}
}

func trace(t *testing.T, tr *Tracer, p Packet, ct CTFlags) Result {
	t.Helper()
	r, err := tr.Trace(p, ct)
	if err != nil {
		t.Fatalf("trace: %v", err)
	}
	return r
}

// wantDelivered checks the packet left through port, and only there, and returns it.
func wantDelivered(t *testing.T, r Result, port uint32) Packet {
	t.Helper()
	if len(r.Outputs) != 1 || r.Outputs[0].Port != port {
		t.Fatalf("want delivery to port %d, got:\n%s", port, r)
	}
	return r.Outputs[0].Packet
}

// wantDropped checks the packet left through no port and that it was dropped in table.
func wantDropped(t *testing.T, r Result, table Table) {
	t.Helper()
	last := r.Steps[len(r.Steps)-1].Table
	if !r.Dropped() || last != table {
		t.Fatalf("want drop in %s, got:\n%s", table.Name, r)
	}
}

func wantTables(t *testing.T, r Result, names ...string) {
	t.Helper()
	if got := r.TableNames(); !slices.Equal(got, names) {
		t.Errorf("tables visited:\n got  %s\n want %s", strings.Join(got, " "), strings.Join(names, " "))
	}
}

func wantMAC(t *testing.T, what string, got, want net.HardwareAddr) {
	t.Helper()
	if got.String() != want.String() {
		t.Errorf("%s = %s, want %s", what, got, want)
	}
}

func wantAddr(t *testing.T, what string, got, want netip.Addr) {
	t.Helper()
	if got != want {
		t.Errorf("%s = %s, want %s", what, got, want)
	}
}
