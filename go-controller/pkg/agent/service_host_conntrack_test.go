package agent

import (
	"errors"
	"net"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/kovs-net/kovs/go-controller/pkg/pipeline"
)

func TestUntranslatedNodePortFilter(t *testing.T) {
	node, vip, endpoint := "172.30.0.1", "10.96.0.20", "10.244.1.10"
	f := newUntranslatedNodePortFilter([]netip.Addr{netip.MustParseAddr(node), netip.MustParseAddr("fd00:172:30::1")},
		[]nodePortFrontend{{ClusterIP: netip.MustParseAddr(vip), NodePort: 31000}})
	entry := func(proto uint8, dst string, dport uint16, answerer string) *netlink.ConntrackFlow {
		e := &netlink.ConntrackFlow{}
		e.Forward.Protocol, e.Forward.SrcIP, e.Forward.DstIP, e.Forward.SrcPort, e.Forward.DstPort =
			proto, net.ParseIP("10.244.2.2"), net.ParseIP(dst), 50054, dport
		e.Reverse.Protocol, e.Reverse.SrcIP, e.Reverse.DstIP = proto, net.ParseIP(answerer), net.ParseIP("10.244.2.2")
		return e
	}
	for _, c := range []struct {
		what  string
		entry *netlink.ConntrackFlow
		want  bool
	}{
		{"delivered to the node itself before the DNAT rule", entry(unix.IPPROTO_UDP, node, 31000, node), true},
		{"translated to the ClusterIP", entry(unix.IPPROTO_UDP, node, 31000, vip), false},
		{"TCP", entry(unix.IPPROTO_TCP, node, 31000, node), false},
		{"another port", entry(unix.IPPROTO_UDP, node, 31001, node), false},
		{"to another host (forwarded)", entry(unix.IPPROTO_UDP, "192.0.2.7", 31000, "192.0.2.7"), false},
		{"answered by an endpoint (not the host's translation)", entry(unix.IPPROTO_UDP, node, 31000, endpoint), true},
	} {
		if got := f.MatchConntrackFlow(c.entry); got != c.want {
			t.Errorf("%s: match %v, want %v", c.what, got, c.want)
		}
	}
}

func TestServiceHostCleansNewUDPNodePorts(t *testing.T) {
	udp := func(vip string, nodePort uint16) pipeline.ServicePort {
		return pipeline.ServicePort{Name: "x/" + vip, ClusterIP: netip.MustParseAddr(vip), IPProto: pipeline.IPProtoUDP, Port: 53, NodePort: nodePort}
	}
	var calls [][]nodePortFrontend
	fail := false
	h := &serviceHost{deleteNodePortEntries: func(fes []nodePortFrontend) (uint, error) {
		slices.SortFunc(fes, func(a, b nodePortFrontend) int { return int(a.NodePort) - int(b.NodePort) })
		calls = append(calls, fes)
		if fail {
			return 0, errors.New("netlink says no")
		}
		return 1, nil
	}}
	tcp := udp("10.96.0.9", 30999)
	tcp.IPProto = pipeline.IPProtoTCP
	step := func(what string, ports []pipeline.ServicePort, want ...uint16) {
		t.Helper()
		calls = nil
		h.cleanNodePortEntries(ports)
		var got []uint16
		for _, c := range calls {
			for _, fe := range c {
				got = append(got, fe.NodePort)
			}
		}
		if !slices.Equal(got, want) {
			t.Errorf("%s: cleaned NodePorts %v, want %v", what, got, want)
		}
	}
	step("first sync", []pipeline.ServicePort{udp("10.96.0.10", 31000), tcp}, 31000)
	step("nothing new", []pipeline.ServicePort{udp("10.96.0.10", 31000), tcp})
	step("a new UDP NodePort", []pipeline.ServicePort{udp("10.96.0.10", 31000), udp("10.96.0.11", 31001)}, 31001)
	fail = true
	step("a failed cleanup", []pipeline.ServicePort{udp("10.96.0.10", 31000), udp("10.96.0.11", 31001), udp("10.96.0.12", 31002)}, 31002)
	fail = false
	step("retried at the next sync", []pipeline.ServicePort{udp("10.96.0.10", 31000), udp("10.96.0.11", 31001), udp("10.96.0.12", 31002)}, 31002)
	step("a port that left and came back", []pipeline.ServicePort{udp("10.96.0.10", 31000)})
	step("came back", []pipeline.ServicePort{udp("10.96.0.10", 31000), udp("10.96.0.11", 31001)}, 31001)
}

func TestServiceHostRejectsNodePortsWithoutEndpoints(t *testing.T) {
	ep := []netip.AddrPort{netip.MustParseAddrPort("10.244.1.10:5353")}
	empty := pipeline.ServiceGroup{ID: pipeline.ServiceGroupBase | 1}
	some := pipeline.ServiceGroup{ID: pipeline.ServiceGroupBase | 2, Endpoints: ep}
	vip := netip.MustParseAddr("10.96.0.20")
	for _, c := range []struct {
		what   string
		port   pipeline.ServicePort
		reject bool
	}{
		{"no endpoints", pipeline.ServicePort{ClusterIP: vip, IPProto: pipeline.IPProtoUDP, Port: 53, NodePort: 31000, Internal: empty, External: empty}, true},
		{"an endpoint", pipeline.ServicePort{ClusterIP: vip, IPProto: pipeline.IPProtoUDP, Port: 53, NodePort: 31000, Internal: some, External: some}, false},
		{"externalTrafficPolicy Local, endpoints on other nodes only", pipeline.ServicePort{ClusterIP: vip, IPProto: pipeline.IPProtoUDP, Port: 53, NodePort: 31000,
			Internal: some, External: empty, Cluster: some, ExternalLocal: true}, false},
		{"externalTrafficPolicy Local, no endpoints", pipeline.ServicePort{ClusterIP: vip, IPProto: pipeline.IPProtoUDP, Port: 53, NodePort: 31000,
			Internal: empty, External: empty, Cluster: empty, ExternalLocal: true}, true},
	} {
		script := (&serviceHost{gateway: "kovs-gw0"}).nftScript([]pipeline.ServicePort{c.port})
		if got := strings.Contains(script, "ip daddr 10.96.0.20 udp dport 31000 reject"); got != c.reject {
			t.Errorf("%s: NodePort rejected %v, want %v:\n%s", c.what, got, c.reject, script)
		}
	}
}
