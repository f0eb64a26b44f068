package agent

import (
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// The tunnel guard drops the host's datagrams to the Geneve port of every node's address,
// of both families, and counts them (the e2e test reads the counter as its evidence).
func TestTunnelGuardScript(t *testing.T) {
	script := tunnelGuardScript([]netip.Addr{netip.MustParseAddr("172.30.0.1"), netip.MustParseAddr("172.30.0.2"),
		netip.MustParseAddr("fd00:172:30::2")})
	for _, want := range []string{
		"type filter hook output priority 0",
		"elements = { 172.30.0.1/32, 172.30.0.2/32 }",
		"elements = { fd00:172:30::2/128 }",
		"ip daddr @nodes4 udp dport 6081 counter drop",
		"ip6 daddr @nodes6 udp dport 6081 counter drop",
	} {
		if !strings.Contains(script, want) {
			t.Errorf("script lacks %q:\n%s", want, script)
		}
	}
	// nft -c checks the script against the kernel without applying it (root only).
	if _, err := exec.LookPath("nft"); err != nil || os.Geteuid() != 0 {
		t.Skip("nft check skipped: needs nft and root")
	}
	for _, s := range []string{script, tunnelGuardScript(nil)} {
		cmd := exec.Command("nft", "-c", "-f", "-")
		cmd.Stdin = strings.NewReader(s)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("nft -c refuses the rules: %v\n%s\n%s", err, out, s)
		}
	}
}
