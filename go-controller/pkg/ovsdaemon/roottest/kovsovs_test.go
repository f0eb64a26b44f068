package roottest

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Both daemons come up and answer, the switch works, the probe passes; SIGTERM stops
// both and kovs-ovs exits 0; the probe then fails.
func TestRunProbeAndSIGTERM(t *testing.T) {
	n := newNode(t)
	n.start()
	n.waitReady()

	id, err := os.ReadFile(n.idFile())
	if err != nil {
		t.Fatalf("no system-id file: %v", err)
	}
	if got := n.systemID(); got != strings.TrimSpace(string(id)) || got == "" {
		t.Errorf("database system-id %q, file %q", got, id)
	}
	// Without --no-wait, ovs-vsctl waits until ovs-vswitchd has applied the change.
	n.vsctl("add-br", "br-test", "--", "set", "Bridge", "br-test", "datapath_type=netdev")
	if _, err := os.Stat(filepath.Join(n.runDir(), "br-test.mgmt")); err != nil {
		t.Errorf("ovs-vswitchd made no management socket for br-test: %v", err)
	}
	// ovs-vswitchd answers on the fixed socket, and through the pidfile (same PID
	// namespace) as operators are used to.
	for _, target := range []string{filepath.Join(n.runDir(), "ovs-vswitchd.ctl"), "ovs-vswitchd"} {
		if out, err := n.appctl(target, "version"); err != nil || !strings.Contains(out, "Open vSwitch") {
			t.Errorf("ovs-appctl -t %s version: %v: %s", target, err, out)
		}
	}
	db, vswitchd := n.pid("ovsdb-server"), n.pid("ovs-vswitchd")

	n.signal(syscall.SIGTERM)
	if code := n.waitExit(30 * time.Second); code != 0 {
		t.Errorf("kovs-ovs exited %d after SIGTERM, want 0", code)
	}
	waitGone(t, "ovs-vswitchd", vswitchd)
	waitGone(t, "ovsdb-server", db)
	if err := n.probe(); err == nil {
		t.Error("probe passes with both daemons stopped")
	}
	if !strings.Contains(n.output.String(), "stopping ovs-vswitchd, then ovsdb-server") {
		t.Errorf("no clean-stop message in kovs-ovs output")
	}
}

// ovs-vswitchd dies: kovs-ovs stops ovsdb-server and exits non-zero, so the kubelet
// restarts the container.
func TestVswitchdDeathEndsAll(t *testing.T) {
	n := newNode(t)
	n.start()
	n.waitReady()
	db, vswitchd := n.pid("ovsdb-server"), n.pid("ovs-vswitchd")
	if err := syscall.Kill(vswitchd, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if code := n.waitExit(30 * time.Second); code == 0 {
		t.Error("kovs-ovs exited 0 after ovs-vswitchd died, want non-zero")
	}
	waitGone(t, "ovsdb-server", db)
	if !strings.Contains(n.output.String(), "ovs-vswitchd (pid") {
		t.Errorf("kovs-ovs did not say which daemon exited:\n%s", n.output.String())
	}
}

// ovsdb-server dies: kovs-ovs stops ovs-vswitchd and exits non-zero.
func TestOvsdbServerDeathEndsAll(t *testing.T) {
	n := newNode(t)
	n.start()
	n.waitReady()
	db, vswitchd := n.pid("ovsdb-server"), n.pid("ovs-vswitchd")
	if err := syscall.Kill(db, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if code := n.waitExit(30 * time.Second); code == 0 {
		t.Error("kovs-ovs exited 0 after ovsdb-server died, want non-zero")
	}
	waitGone(t, "ovs-vswitchd", vswitchd)
}

// The system-id survives a clean restart, a SIGKILL of kovs-ovs (whose daemons must not
// outlive it), and the loss of the system-id file (it is taken back from the database).
func TestRestartKeepsSystemID(t *testing.T) {
	n := newNode(t)
	n.start()
	n.waitReady()
	first := n.systemID()

	n.signal(syscall.SIGTERM)
	n.waitExit(30 * time.Second)
	n.start()
	n.waitReady()
	if got := n.systemID(); got != first {
		t.Errorf("after a restart the system-id is %q, was %q", got, first)
	}

	db, vswitchd := n.pid("ovsdb-server"), n.pid("ovs-vswitchd")
	n.signal(syscall.SIGKILL)
	n.waitExit(30 * time.Second)
	waitGone(t, "ovs-vswitchd of a killed kovs-ovs", vswitchd)
	waitGone(t, "ovsdb-server of a killed kovs-ovs", db)
	if err := os.Remove(n.idFile()); err != nil {
		t.Fatal(err)
	}
	n.start()
	n.waitReady()
	if got := n.systemID(); got != first {
		t.Errorf("after SIGKILL and without the file the system-id is %q, was %q", got, first)
	}
	if b, _ := os.ReadFile(n.idFile()); strings.TrimSpace(string(b)) != first {
		t.Errorf("system-id file holds %q, want %q", b, first)
	}
}

// A database made with another schema (an older image's) is converted, with a backup.
func TestDatabaseConversion(t *testing.T) {
	n := newNode(t)
	const schema = "/usr/share/openvswitch/vswitch.ovsschema"
	b, err := os.ReadFile(schema)
	if err != nil {
		t.Fatal(err)
	}
	var s map[string]any
	if err := json.Unmarshal(b, &s); err != nil {
		t.Fatal(err)
	}
	s["version"] = "1.0.0"
	old, _ := json.Marshal(s)
	oldSchema := filepath.Join(n.dir, "old.ovsschema")
	if err := os.WriteFile(oldSchema, old, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Dir(n.dbFile()), 0o755); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("ovsdb-tool", "create", n.dbFile(), oldSchema).CombinedOutput(); err != nil {
		t.Fatalf("ovsdb-tool create: %v: %s", err, out)
	}

	n.start()
	n.waitReady()
	want, _ := exec.Command("ovsdb-tool", "schema-version", schema).Output()
	got, _ := exec.Command("ovsdb-tool", "db-version", n.dbFile()).Output()
	if strings.TrimSpace(string(got)) != strings.TrimSpace(string(want)) {
		t.Errorf("database version %q after start, want the schema's %q", got, want)
	}
	backups, _ := filepath.Glob(n.dbFile() + ".backup1.0.0-*")
	if len(backups) != 1 {
		t.Errorf("want one backup of the old database, found %v", backups)
	}
}

// The probe fails where no OVS runs.
func TestProbeFailsWithoutOVS(t *testing.T) {
	n := newNode(t)
	if err := n.probe(); err == nil {
		t.Fatal("probe passes on an empty run directory")
	} else if !strings.Contains(err.Error(), "ovsdb-server does not answer") {
		t.Errorf("probe error does not say what is wrong: %v", err)
	}
}

// kovs-agent runs in another container of the pod, so in another PID namespace, where
// ovs-appctl cannot use the pidfile (its PID is the ovs container's). The fixed unixctl
// socket works from there, and so does the probe.
func TestVswitchdReachableFromAnotherPIDNamespace(t *testing.T) {
	n := newNode(t)
	if _, err := exec.LookPath("unshare"); err != nil {
		t.Fatal("unshare not found: install util-linux")
	}
	n.startWith("unshare", "--pid", "--fork", "--kill-child=SIGTERM")
	n.waitReady()
	if out, err := n.appctl(filepath.Join(n.runDir(), "ovs-vswitchd.ctl"), "version"); err != nil || !strings.Contains(out, "Open vSwitch") {
		t.Errorf("ovs-appctl -t <run-dir>/ovs-vswitchd.ctl from another PID namespace: %v: %s", err, out)
	}
	// What the agent needs of ovs-vswitchd on the userspace datapath.
	n.vsctl("add-br", "br-test", "--", "set", "Bridge", "br-test", "datapath_type=netdev")
	if out, err := n.appctl(filepath.Join(n.runDir(), "ovs-vswitchd.ctl"), "tnl/neigh/set", "br-test", "192.0.2.1", "0a:00:00:00:00:01"); err != nil {
		t.Errorf("tnl/neigh/set from another PID namespace: %v: %s", err, out)
	}
	// unshare does not pass SIGTERM on: signal kovs-ovs, its child, directly.
	children, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(n.proc.Process.Pid), "task", strconv.Itoa(n.proc.Process.Pid), "children"))
	if err != nil || len(strings.Fields(string(children))) != 1 {
		t.Fatalf("kovs-ovs under unshare: children %q: %v", children, err)
	}
	pid, _ := strconv.Atoi(strings.Fields(string(children))[0])
	if err := syscall.Kill(pid, syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := n.waitExit(30 * time.Second); code != 0 {
		t.Errorf("unshare exited %d after kovs-ovs got SIGTERM, want 0", code)
	}
}
