package agent

import (
	"os"
	"path/filepath"
	"testing"
)

func TestVswitchdCtlResolvesTheSocketWithoutAPidCheck(t *testing.T) {
	touch := func(p string) {
		if err := os.WriteFile(p, nil, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	dir := t.TempDir()
	if got := vswitchdCtl("", dir); got != "" {
		t.Fatalf("empty run dir: %q, want the daemon name left to ovs-appctl", got)
	}
	// ovs-ctl's layout: a pidfile and a socket named after the pid.
	if err := os.WriteFile(filepath.Join(dir, "ovs-vswitchd.pid"), []byte("4242\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	touch(filepath.Join(dir, "ovs-vswitchd.4242.ctl"))
	if got, want := vswitchdCtl("", dir), filepath.Join(dir, "ovs-vswitchd.4242.ctl"); got != want {
		t.Fatalf("pidfile layout: %q, want %q", got, want)
	}
	// A fixed socket (kovs-ovs, --unixctl) wins over the pidfile.
	touch(filepath.Join(dir, "ovs-vswitchd.ctl"))
	if got, want := vswitchdCtl("", dir), filepath.Join(dir, "ovs-vswitchd.ctl"); got != want {
		t.Fatalf("fixed socket: %q, want %q", got, want)
	}
	if got := vswitchdCtl("/x/y.ctl", dir); got != "/x/y.ctl" {
		t.Fatalf("explicit: %q", got)
	}
}
