package agent

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestConntrackTimeoutsAsKubeProxy: the agent writes kube-proxy's TCP conntrack timeouts
// in seconds (CLOSE_WAIT 3600, established 86400 by default), and leaves a timeout of 0
// alone.
func TestConntrackTimeoutsAsKubeProxy(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, "net/netfilter")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"nf_conntrack_tcp_timeout_established", "nf_conntrack_tcp_timeout_close_wait"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte("60"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	read := func(name string) string {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	if err := writeSysctls(root, conntrackTimeoutSysctls(0, DefaultConntrackTCPCloseWait)); err != nil {
		t.Fatal(err)
	}
	if got := read("nf_conntrack_tcp_timeout_close_wait"); got != "3600" {
		t.Errorf("CLOSE_WAIT timeout %q, want kube-proxy's 3600", got)
	}
	if got := read("nf_conntrack_tcp_timeout_established"); got != "60" {
		t.Errorf("established timeout 0 (leave it) wrote %q", got)
	}
	if err := writeSysctls(root, conntrackTimeoutSysctls(DefaultConntrackTCPEstablished, 0)); err != nil {
		t.Fatal(err)
	}
	if got := read("nf_conntrack_tcp_timeout_established"); got != "86400" {
		t.Errorf("established timeout %q, want kube-proxy's 86400", got)
	}
	if err := writeSysctls(filepath.Join(root, "missing"), conntrackTimeoutSysctls(time.Hour, time.Hour)); err == nil {
		t.Error("writing to a missing sysctl: no error")
	}
}
