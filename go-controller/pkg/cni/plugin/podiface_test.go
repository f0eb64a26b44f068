package plugin

import (
	"fmt"
	"strings"
	"testing"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/kovs-net/kovs/go-controller/pkg/cni"
)

func dualStackConfig() *cni.PodNetworkConfig {
	return &cni.PodNetworkConfig{
		IPs: []cni.IPConfig{
			{Address: "10.244.1.5/24", Gateway: "10.244.1.1"},
			{Address: "fd00:10:244:1::5/64", Gateway: "fd00:10:244:1::1"},
		},
		MAC:                      "0a:58:0a:f4:01:05",
		MTU:                      1450,
		DisableTxChecksumOffload: true,
	}
}

func routeStrings(routes []podRoute) []string {
	out := make([]string, 0, len(routes))
	for _, r := range routes {
		if r.gw == nil {
			out = append(out, r.dst.String()+" dev")
		} else {
			out = append(out, fmt.Sprintf("%s via %s", r.dst, r.gw))
		}
	}
	return out
}

func TestPlanRoutes(t *testing.T) {
	for _, tc := range []struct {
		name   string
		ips    []cni.IPConfig
		routes []cni.RouteConfig
		want   []string
	}{{
		name: "default route per family, gateways in the prefix",
		ips:  dualStackConfig().IPs,
		want: []string{"0.0.0.0/0 via 10.244.1.1", "::/0 via fd00:10:244:1::1"},
	}, {
		name: "gateway outside the prefix is reached on the link first",
		ips:  []cni.IPConfig{{Address: "10.244.1.5/32", Gateway: "169.254.1.1"}, {Address: "fd00::5/128", Gateway: "fe80::1"}},
		want: []string{"169.254.1.1/32 dev", "0.0.0.0/0 via 169.254.1.1", "fe80::1/128 dev", "::/0 via fe80::1"},
	}, {
		name:   "extra routes default to their family's gateway",
		ips:    dualStackConfig().IPs,
		routes: []cni.RouteConfig{{Dst: "10.96.0.0/12"}, {Dst: "fd00:96::/108", GW: "fd00:10:244:1::2"}},
		want: []string{"0.0.0.0/0 via 10.244.1.1", "::/0 via fd00:10:244:1::1",
			"10.96.0.0/12 via 10.244.1.1", "fd00:96::/108 via fd00:10:244:1::2"},
	}, {
		name:   "a family without gateway gets routes on the link",
		ips:    []cni.IPConfig{{Address: "10.244.1.5/24"}},
		routes: []cni.RouteConfig{{Dst: "10.96.0.0/12"}},
		want:   []string{"10.96.0.0/12 dev"},
	}, {
		name:   "a default route in Routes is not added twice",
		ips:    []cni.IPConfig{{Address: "10.244.1.5/24", Gateway: "10.244.1.1"}},
		routes: []cni.RouteConfig{{Dst: "0.0.0.0/0", GW: "10.244.1.1"}},
		want:   []string{"0.0.0.0/0 via 10.244.1.1"},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := dualStackConfig()
			cfg.IPs, cfg.Routes = tc.ips, tc.routes
			spec, err := newPodInterfaceSpec("eth0", cfg)
			if err != nil {
				t.Fatal(err)
			}
			got := routeStrings(spec.routes)
			if strings.Join(got, "; ") != strings.Join(tc.want, "; ") {
				t.Errorf("routes =\n  %v\nwant\n  %v", got, tc.want)
			}
		})
	}
}

func TestNetlinkAddrsAndRoutes(t *testing.T) {
	cfg := dualStackConfig()
	cfg.IPs[0] = cni.IPConfig{Address: "10.244.1.5/32", Gateway: "169.254.1.1"}
	spec, err := newPodInterfaceSpec("eth0", cfg)
	if err != nil {
		t.Fatal(err)
	}
	if spec.name != "eth0" || spec.mtu != 1450 || spec.mac.String() != "0a:58:0a:f4:01:05" || !spec.disableTxChecksum {
		t.Errorf("spec = %+v", spec)
	}
	addrs := spec.netlinkAddrs()
	if len(addrs) != 2 || addrs[0].String() != "10.244.1.5/32" || addrs[0].Flags != 0 {
		t.Errorf("IPv4 address = %v (flags %#x), want 10.244.1.5/32 with DAD flags untouched", addrs[0], addrs[0].Flags)
	}
	if addrs[1].IPNet.String() != "fd00:10:244:1::5/64" || addrs[1].Flags&unix.IFA_F_NODAD == 0 {
		t.Errorf("IPv6 address = %v (flags %#x), want nodad", addrs[1], addrs[1].Flags)
	}
	routes := spec.netlinkRoutes(7)
	if len(routes) != 3 {
		t.Fatalf("routes = %v", routes)
	}
	for _, r := range routes {
		if r.LinkIndex != 7 {
			t.Errorf("route %v not on link 7", r)
		}
	}
	if routes[0].Scope != netlink.SCOPE_LINK || routes[0].Gw != nil || routes[0].Dst.String() != "169.254.1.1/32" {
		t.Errorf("first route = %v, want the gateway on the link", routes[0])
	}
	if routes[1].Scope != netlink.SCOPE_UNIVERSE || !routes[1].Gw.Equal(spec.addrs[0].gateway) {
		t.Errorf("second route = %v, want the default via 169.254.1.1", routes[1])
	}
}

func TestIPConfigsRoundTrip(t *testing.T) {
	spec, err := newPodInterfaceSpec("eth0", dualStackConfig())
	if err != nil {
		t.Fatal(err)
	}
	got := spec.ipConfigs()
	if len(got) != 2 || got[0] != dualStackConfig().IPs[0] || got[1] != dualStackConfig().IPs[1] {
		t.Errorf("ipConfigs = %+v, want the agent's", got)
	}
	if !spec.hasIPv6() {
		t.Error("hasIPv6 = false for a dual-stack pod")
	}
}
