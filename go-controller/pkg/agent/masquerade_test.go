package agent

import (
	"net/netip"
	"strings"
	"testing"
)

func TestMasqueradeScript(t *testing.T) {
	m := &masquerader{gateway: "kovs-gw0", pods: []netip.Prefix{netip.MustParsePrefix("10.244.0.0/16"), netip.MustParsePrefix("fd00:10:244::/48")},
		routed:   []netip.Prefix{netip.MustParsePrefix("192.168.0.0/16")},
		families: map[bool]bool{false: true, true: true}}
	script := m.script([]netip.Addr{netip.MustParseAddr("172.30.0.1"), netip.MustParseAddr("fd00:172:30::1")})
	for _, want := range []string{
		`oifname "kovs-gw0" return`,
		"ip saddr @pods4 ip daddr != @keep4 masquerade",
		"ip6 saddr @pods6 ip6 daddr != @keep6 masquerade",
		"elements = { 10.244.0.0/16, 192.168.0.0/16, 172.30.0.1/32 }",
		"elements = { fd00:10:244::/48, fd00:172:30::1/128 }",
		"type nat hook postrouting priority 100",
	} {
		if !strings.Contains(script, want) {
			t.Errorf("script lacks %q:\n%s", want, script)
		}
	}
	m.families = map[bool]bool{false: true}
	if s := m.script(nil); strings.Contains(s, "ip6 ") || strings.Contains(s, "pods6") {
		t.Errorf("an IPv4-only node masquerades IPv6:\n%s", s)
	}
	m.off = true
	if s := m.script(nil); strings.Contains(s, "postrouting") || !strings.HasSuffix(s, "delete table inet kovs-masquerade\n") {
		t.Errorf("with masquerading off the script must only remove the table:\n%s", s)
	}
}
