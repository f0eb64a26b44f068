package pipeline

import (
	"fmt"
	"strings"
	"testing"
)

// TestFlowString pins the rendering to what `ovs-ofctl -O OpenFlow15 dump-flows --no-stats`
// prints (OVS 3.1); ovs-flows/check-goldens.sh checks the same against a live switch.
func TestFlowString(t *testing.T) {
	for _, tc := range []struct {
		flow Flow
		want string
	}{
		{
			Flow{Table: Classifier, Priority: 200, Cookie: NewCookie(1, CategoryPod, 3),
				Match: MatchAll().InPort(3), Actions: []Action{LoadReg(PortClassPod.Mark()), Goto(SpoofGuard)}},
			"cookie=0x1030000000003, priority=200,in_port=3 actions=set_field:0x1/0xf->reg0,goto_table:10",
		},
		{
			Flow{Table: L3Forwarding, Priority: 150,
				Match:   MatchProtocol(ProtoIPv6).IPDst(cidr("fd00:10:244:3::/64")),
				Actions: []Action{SetTunDst(ip("fd00:172:31::3")), SetTunID(100), LoadReg(OutPortField.Mark(1)), Goto(L3DecTTL)}},
			"table=60, priority=150,ipv6,ipv6_dst=fd00:10:244:3::/64 actions=set_field:fd00:172:31::3->tun_ipv6_dst,set_field:0x64->tun_id,set_field:0x1->reg1,goto_table:61",
		},
		{
			// Fields render in OVS's order whatever order they were added in.
			Flow{Table: SpoofGuard, Priority: 210,
				Match: MatchAll().NDSLL(mac("0a:58:0a:f4:01:0a")).ICMPv6Type(135).IPSrc(cidr("fe80::/10")).
					EthSrc(mac("0a:58:0a:f4:01:0a")).InPort(3).WithProtocol(ProtoICMPv6),
				Actions: []Action{Goto(NDResponder)}},
			"table=10, priority=210,icmp6,in_port=3,dl_src=0a:58:0a:f4:01:0a,ipv6_src=fe80::/10,icmp_type=135,nd_sll=0a:58:0a:f4:01:0a actions=goto_table:21",
		},
		{
			Flow{Table: ConntrackState, Priority: 190, Match: MatchAll().CTState(CTEstablished|CTTracked, CTNew),
				Actions: []Action{Goto(L3Forwarding)}},
			"table=31, priority=190,ct_state=-new+est+trk actions=goto_table:60",
		},
		{
			Flow{Table: ConntrackZone, Priority: 100, Match: MatchProtocol(ProtoIPv4),
				Actions: []Action{CT{Zone: CTZone, Recirculate: true, Table: ConntrackState, NAT: true}}},
			"table=30, priority=100,ip actions=ct(table=31,zone=65520,nat)",
		},
		{
			Flow{Table: Output, Priority: 0},
			"table=90, priority=0 actions=drop",
		},
	} {
		if got := tc.flow.String(); got != tc.want {
			t.Errorf("got  %s\nwant %s", got, tc.want)
		}
	}
}

func TestMatchIsAValue(t *testing.T) {
	base := MatchProtocol(ProtoIPv4).InPort(3)
	a := base.IPSrc(cidr("10.0.0.1/32"))
	b := base.IPSrc(cidr("10.0.0.2/32"))
	if base.String() != "ip,in_port=3" || a.String() != "ip,in_port=3,nw_src=10.0.0.1" || b.String() != "ip,in_port=3,nw_src=10.0.0.2" {
		t.Errorf("derived matches share state: %s | %s | %s", base, a, b)
	}
	if got := a.IPSrc(cidr("10.0.0.0/8")).String(); got != "ip,in_port=3,nw_src=10.0.0.0/8" {
		t.Errorf("re-matching a field replaces it: %s", got)
	}
}

func TestFormatByTable(t *testing.T) {
	sc := oneNodeTwoPods()
	text := FormatByTable(sc.flows(t))
	for _, tbl := range Tables() {
		if !strings.Contains(text, fmt.Sprintf("# table %d %s (", tbl.ID, tbl.Name)) {
			t.Errorf("no heading for table %s", tbl.Name)
		}
	}
}
