package ovs

import (
	"net/netip"
	"slices"
	"strings"
	"testing"
)

// dumpConntrack is `ovs-appctl dpctl/dump-conntrack zone=65520` of OVS 3.1 (userspace
// datapath): a translated UDP flow, an untranslated one, IPv6, ICMP, and -m's fields.
const dumpConntrack = `udp,orig=(src=10.244.1.5,dst=10.96.0.10,sport=40000,dport=80),reply=(src=10.244.2.10,dst=10.244.1.5,sport=8080,dport=40000),zone=65520
udp,orig=(src=10.244.1.5,dst=10.96.0.10,sport=40006,dport=80),reply=(src=10.96.0.10,dst=10.244.1.5,sport=80,dport=40006),zone=65520
udp,orig=(src=fd00::5,dst=fd00:96::10,sport=40000,dport=80),reply=(src=fd00::10,dst=fd00::5,sport=8080,dport=40000),id=0,zone=65520,status=0
icmp,orig=(src=10.244.1.5,dst=10.244.2.10,id=7,type=8,code=0),reply=(src=10.244.2.10,dst=10.244.1.5,id=7,type=0,code=0),zone=65520
tcp,orig=(src=10.244.1.5,dst=10.96.0.10,sport=41000,dport=80),reply=(src=10.244.2.10,dst=10.244.1.5,sport=8080,dport=41000),zone=65520,protoinfo=(state=ESTABLISHED)

`

func TestParseConntrack(t *testing.T) {
	entries, err := ParseConntrack(dumpConntrack)
	if err != nil {
		t.Fatal(err)
	}
	ap := netip.MustParseAddrPort
	want := []ConntrackEntry{
		{IPProto: 17, Zone: 65520, Orig: ConntrackTuple{ap("10.244.1.5:40000"), ap("10.96.0.10:80")}, Reply: ConntrackTuple{ap("10.244.2.10:8080"), ap("10.244.1.5:40000")}},
		{IPProto: 17, Zone: 65520, Orig: ConntrackTuple{ap("10.244.1.5:40006"), ap("10.96.0.10:80")}, Reply: ConntrackTuple{ap("10.96.0.10:80"), ap("10.244.1.5:40006")}},
		{IPProto: 17, Zone: 65520, Orig: ConntrackTuple{ap("[fd00::5]:40000"), ap("[fd00:96::10]:80")}, Reply: ConntrackTuple{ap("[fd00::10]:8080"), ap("[fd00::5]:40000")}},
		{IPProto: 1, Zone: 65520, Orig: ConntrackTuple{ap("10.244.1.5:0"), ap("10.244.2.10:0")}, Reply: ConntrackTuple{ap("10.244.2.10:0"), ap("10.244.1.5:0")}},
		{IPProto: 6, Zone: 65520, Orig: ConntrackTuple{ap("10.244.1.5:41000"), ap("10.96.0.10:80")}, Reply: ConntrackTuple{ap("10.244.2.10:8080"), ap("10.244.1.5:41000")}},
	}
	if !slices.Equal(entries, want) {
		t.Errorf("parsed\n%v\nwant\n%v", entries, want)
	}
}

func TestParseConntrackRejectsGarbage(t *testing.T) {
	for _, line := range []string{
		"udp",
		"udp,orig=(src=10.244.1.5,dst=10.96.0.10,sport=40000,dport=80),zone=65520",
		"udp,orig=(src=10.244.1.5,dst=10.96.0.10,sport=40000,dport=80,reply=(src=x),zone=1",
		"udp,orig=(src=10.244.1.5,dst=nowhere,sport=1,dport=2),reply=(src=10.244.1.5,dst=10.96.0.10,sport=2,dport=1)",
		"udp,orig=(src=10.244.1.5,dst=10.96.0.10,sport=70000,dport=2),reply=(src=10.244.1.5,dst=10.96.0.10,sport=2,dport=1)",
	} {
		if _, err := ParseConntrack("udp,orig=(src=1.1.1.1,dst=2.2.2.2,sport=1,dport=2),reply=(src=2.2.2.2,dst=1.1.1.1,sport=2,dport=1),zone=3\n" + line); err == nil || !strings.Contains(err.Error(), "line 2") {
			t.Errorf("%q: error %v, want one that names line 2", line, err)
		}
	}
}

func TestConntrackFlowsArgs(t *testing.T) {
	for _, c := range []struct {
		f    ConntrackFlows
		want string
	}{
		{ConntrackFlows{Zone: 65520, IPProto: 17, OrigDst: netip.MustParseAddrPort("10.96.0.10:80"), ReplySrc: netip.MustParseAddrPort("10.244.2.10:8080")},
			"zone=65520 ct_nw_dst=10.96.0.10,ct_nw_proto=17,ct_tp_dst=80 ct_nw_src=10.244.2.10,ct_tp_src=8080"},
		{ConntrackFlows{Zone: 65520, IPProto: 17, OrigDst: netip.MustParseAddrPort("[fd00:96::10]:53"), ReplySrc: netip.MustParseAddrPort("[fd00:96::10]:53")},
			"zone=65520 ct_ipv6_dst=fd00:96::10,ct_nw_proto=17,ct_tp_dst=53 ct_ipv6_src=fd00:96::10,ct_tp_src=53"},
	} {
		if got := strings.Join(c.f.Args(), " "); got != c.want {
			t.Errorf("args %q, want %q", got, c.want)
		}
	}
}
