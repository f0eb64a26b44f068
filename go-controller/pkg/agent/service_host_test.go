package agent

import (
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/kovs-net/kovs/go-controller/pkg/pipeline"
)

func hostTestPorts() []pipeline.ServicePort {
	ep := netip.MustParseAddrPort
	g := pipeline.ServiceGroup{ID: pipeline.ServiceGroupBase | 1, Endpoints: []netip.AddrPort{ep("10.244.1.10:8080")}}
	return []pipeline.ServicePort{
		{Name: "x/web:http/TCP", ClusterIP: netip.MustParseAddr("10.96.0.10"), IPProto: pipeline.IPProtoTCP, Port: 80, NodePort: 30080, Internal: g, External: g},
		{Name: "x/web:http/TCP", ClusterIP: netip.MustParseAddr("fd00:10:96::a"), IPProto: pipeline.IPProtoTCP, Port: 80, NodePort: 30080,
			Internal: pipeline.ServiceGroup{ID: pipeline.ServiceGroupBase | 2, Endpoints: []netip.AddrPort{ep("[fd00:10:244:1::a]:8080")}},
			External: pipeline.ServiceGroup{ID: pipeline.ServiceGroupBase | 3}, ExternalLocal: true},
		{Name: "x/empty:dns/UDP", ClusterIP: netip.MustParseAddr("10.96.0.20"), IPProto: pipeline.IPProtoUDP, Port: 53,
			Internal: pipeline.ServiceGroup{ID: pipeline.ServiceGroupBase | 4}, External: pipeline.ServiceGroup{ID: pipeline.ServiceGroupBase | 4},
			ExternalIPs: []netip.Addr{netip.MustParseAddr("203.0.113.250")}, Cluster: pipeline.ServiceGroup{ID: pipeline.ServiceGroupBase | 4}},
	}
}

func TestServiceHostRules(t *testing.T) {
	h := &serviceHost{gateway: "kovs-gw0"}
	script := h.nftScript(hostTestPorts())
	for _, want := range []string{
		"dnat ip to 10.96.0.10:30080",
		"dnat ip6 to [fd00:10:96::a]:30080",
		`oifname "kovs-gw0" ip daddr 10.96.0.10 tcp dport 30080 ct status dnat masquerade`,
		"ip daddr 10.96.0.20 udp dport 53 reject",
		"ip daddr 203.0.113.250 udp dport 53 reject", // its external IP, as kube-proxy rejects it
		// A ClusterIP on a port that is no Service port: rejected, not looped.
		"ct status dnat accept",
		"ip daddr { 10.96.0.10, 10.96.0.20 } ip daddr . meta l4proto . th dport != { 10.96.0.10 . tcp . 80, 10.96.0.20 . udp . 53 } meta l4proto tcp reject with tcp reset",
		"ip6 daddr { fd00:10:96::a } ip6 daddr . meta l4proto . th dport != { fd00:10:96::a . tcp . 80 } reject",
		// A pod's packet that followed a stale untranslated entry is not looped back.
		`iifname "kovs-gw0" oifname "kovs-gw0" ip daddr { 10.96.0.10, 10.96.0.20 } drop`,
		`iifname "kovs-gw0" oifname "kovs-gw0" ip6 daddr { fd00:10:96::a } drop`,
	} {
		if !strings.Contains(script, want) {
			t.Errorf("rules lack %q:\n%s", want, script)
		}
	}
	if strings.Contains(script, "ip6 daddr fd00:10:96::a tcp dport 30080 ct status dnat masquerade") {
		t.Errorf("externalTrafficPolicy Local is masqueraded:\n%s", script)
	}

	// nft -c checks the script against the kernel without applying it (root only).
	if _, err := exec.LookPath("nft"); err != nil || os.Geteuid() != 0 {
		t.Skip("nft check skipped: needs nft and root")
	}
	cmd := exec.Command("nft", "-c", "-f", "-")
	cmd.Stdin = strings.NewReader(script)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Errorf("nft -c refuses the rules: %v\n%s\n%s", err, out, script)
	}
}
