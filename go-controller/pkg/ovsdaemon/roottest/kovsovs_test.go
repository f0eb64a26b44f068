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

	"github.com/kovs-net/kovs/go-controller/pkg/ovsdaemon"
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

// ovsdb-server dies: kovs-ovs starts it again alone. ovs-vswitchd keeps running with its
// flows and keeps forwarding (a database crash is no datapath outage: a stream of frames
// through br0, every 5 ms from before the kill until after ovs-vswitchd took
// configuration from the new ovsdb-server, arrives whole) and takes configuration from the
// new ovsdb-server. Once, kovs-ovs stopped ovs-vswitchd and exited.
func TestOvsdbServerDeathRestartsItAlone(t *testing.T) {
	n := newNode(t)
	n.start()
	n.waitReady()
	n.vsctl("add-br", "br0", "--", "set", "bridge", "br0", "datapath_type=netdev", "fail_mode=secure",
		"--", "add-port", "br0", "s1", "--", "set", "interface", "s1", "type=internal", "ofport_request=1",
		"--", "add-port", "br0", "s2", "--", "set", "interface", "s2", "type=internal", "ofport_request=2")
	mgmt := "unix:" + filepath.Join(n.runDir(), "br0.mgmt")
	for _, flow := range []string{"priority=7,ip,nw_dst=192.0.2.7,actions=drop", "priority=5,in_port=1,actions=output:2"} {
		if out, err := exec.Command("ovs-ofctl", "add-flow", mgmt, flow).CombinedOutput(); err != nil {
			t.Fatalf("ovs-ofctl add-flow: %v: %s", err, out)
		}
	}
	traffic := n.startStream("s1", "s2", 5*time.Millisecond)
	traffic.waitReceived(20)
	db, vswitchd := n.pid("ovsdb-server"), n.pid("ovs-vswitchd")
	killed := time.Now()
	if err := syscall.Kill(db, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	waitGone(t, "the killed ovsdb-server", db)
	deadline := time.Now().Add(30 * time.Second)
	for {
		b, _ := os.ReadFile(filepath.Join(n.runDir(), "ovsdb-server.pid"))
		if pid, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && pid != db && alive(pid) {
			break
		}
		select {
		case <-n.done:
			t.Fatalf("kovs-ovs exited (%v) after ovsdb-server died, want it to start ovsdb-server again:\n%s", n.exit, n.output.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("no new ovsdb-server 30s after the old one died:\n%s", n.output.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
	n.waitReady()
	if !alive(vswitchd) || n.pid("ovs-vswitchd") != vswitchd {
		t.Fatalf("ovs-vswitchd (pid %d) did not outlive ovsdb-server's crash", vswitchd)
	}
	out, err := exec.Command("ovs-ofctl", "dump-flows", mgmt).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "nw_dst=192.0.2.7") {
		t.Errorf("ovs-vswitchd lost its flows across ovsdb-server's restart (%v):\n%s", err, out)
	}
	// ovs-vsctl without --no-wait returns once ovs-vswitchd applied the change: it
	// reconnected to the new ovsdb-server.
	n.vsctl("add-port", "br0", "p1", "--", "set", "interface", "p1", "type=internal")
	if ofport := n.vsctl("get", "interface", "p1", "ofport"); ofport == "-1" || ofport == "[]" {
		t.Errorf("ovs-vswitchd did not add port p1 after ovsdb-server's restart: ofport %s", ofport)
	}
	traffic.waitReceived(20)
	sent, received, longest, at := traffic.finish()
	t.Logf("through ovsdb-server's crash and restart: %d frames sent, %d forwarded, longest gap between two %s, ended %s after the kill",
		sent, received, longest, at.Sub(killed).Round(time.Millisecond))
	if received != sent {
		t.Errorf("ovs-vswitchd forwarded %d of %d frames across ovsdb-server's crash and restart, want all", received, sent)
	}
}

// ovs-vswitchd restarted under kovs-agent's bridge starts with flow-restore-wait=true
// (it keeps the datapath flows and handles no packet until the agent has restored its
// tables and cleared the key); on a node kovs-agent never set up, or with another bridge
// beside br-int, it does not wait; and when no agent clears the key within
// --flow-restore-wait-timeout, kovs-ovs does.
func TestFlowRestoreWaitAfterARestart(t *testing.T) {
	n := newNode(t)
	n.extra = []string{"--flow-restore-wait-timeout=0"}
	n.start()
	n.waitReady()
	waiting := func() string {
		return n.vsctl("--if-exists", "get", "Open_vSwitch", ".", "other_config:flow-restore-wait")
	}
	if w := waiting(); w != "" {
		t.Errorf("flow-restore-wait %s on a node without kovs-agent's bridge: nothing would clear it", w)
	}
	n.vsctl("add-br", "br-int", "--", "set", "bridge", "br-int", "datapath_type=netdev", "fail_mode=secure",
		"external_ids:kovs.io/owner=kovs-agent")
	n.signal(syscall.SIGTERM)
	n.waitExit(30 * time.Second)

	n.start()
	n.waitReady()
	if w := waiting(); w != `"true"` {
		t.Fatalf("after a restart under kovs-agent's br-int: flow-restore-wait %q, want \"true\"", w)
	}
	// What kovs-agent does once br-int's flows are back.
	n.vsctl("remove", "Open_vSwitch", ".", "other_config", "flow-restore-wait")
	n.signal(syscall.SIGTERM)
	n.waitExit(30 * time.Second)

	// Another bridge (an uplink bridge with the node's address) would wait for an agent
	// that may need that address to come back: no wait then.
	n.start()
	n.waitReady()
	n.vsctl("add-br", "br-ex", "--", "set", "bridge", "br-ex", "datapath_type=netdev")
	n.signal(syscall.SIGTERM)
	n.waitExit(30 * time.Second)
	n.start()
	n.waitReady()
	if w := waiting(); w != "" {
		t.Errorf("flow-restore-wait %s with br-ex beside br-int: br-ex would wait for kovs-agent", w)
	}
	n.vsctl("del-br", "br-ex")
	n.signal(syscall.SIGTERM)
	n.waitExit(30 * time.Second)

	n.extra = []string{"--flow-restore-wait-timeout=1s"}
	n.start()
	n.waitReady()
	deadline := time.Now().Add(30 * time.Second)
	for waiting() != "" {
		if time.Now().After(deadline) {
			t.Fatalf("flow-restore-wait still %s 30s after a 1s --flow-restore-wait-timeout:\n%s", waiting(), n.output.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
	if !strings.Contains(n.output.String(), "did not restore its flows in time") {
		t.Errorf("kovs-ovs cleared flow-restore-wait without saying why:\n%s", n.output.String())
	}
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

// kovs-agent marked an uninstall (kovsctl uninstall, then `kubectl delete -k` stops the
// agent and OVS together): on SIGTERM kovs-ovs keeps both daemons up until the agent has
// removed its bridges through them, then stops. Without the mark it stops at once (an
// OVS upgrade waits for nothing).
func TestStopWaitsForAnUninstallingAgent(t *testing.T) {
	n := newNode(t)
	n.extra = []string{"--uninstall-wait=60s"}
	n.start()
	n.waitReady()
	n.vsctl("add-br", "br-int", "--", "set", "bridge", "br-int", "datapath_type=netdev", "fail_mode=secure",
		"external_ids:kovs.io/owner=kovs-agent")
	marker := filepath.Join(n.runDir(), ovsdaemon.UninstallMarker)
	if err := os.WriteFile(marker, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	n.signal(syscall.SIGTERM)
	deadline := time.Now().Add(30 * time.Second)
	for !strings.Contains(n.output.String(), "waiting for kovs-agent to remove its bridges") {
		if time.Now().After(deadline) {
			t.Fatalf("kovs-ovs did not wait for the uninstalling agent after SIGTERM:\n%s", n.output.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	// What the agent does at its shutdown: both daemons still serve it (ovs-vsctl
	// without --no-wait waits for ovs-vswitchd to apply the deletion), also after the
	// bridge's row is gone, until the agent marks its cleanup done (its devices gone).
	n.vsctl("del-br", "br-int")
	n.vsctl("add-br", "br-after", "--", "set", "bridge", "br-after", "datapath_type=netdev")
	if err := os.Remove(marker); err != nil {
		t.Fatal(err)
	}
	if code := n.waitExit(30 * time.Second); code != 0 {
		t.Errorf("kovs-ovs exited %d after the agent's cleanup, want 0", code)
	}
	if !strings.Contains(n.output.String(), "kovs-agent removed its bridges") {
		t.Errorf("kovs-ovs stopped without seeing the bridges go:\n%s", n.output.String())
	}

	// No mark: SIGTERM stops at once, with the agent's bridge still there.
	n.start()
	n.waitReady()
	n.vsctl("add-br", "br-int", "--", "set", "bridge", "br-int", "datapath_type=netdev", "fail_mode=secure",
		"external_ids:kovs.io/owner=kovs-agent")
	before := strings.Count(n.output.String(), "waiting for kovs-agent")
	n.signal(syscall.SIGTERM)
	if code := n.waitExit(30 * time.Second); code != 0 {
		t.Errorf("kovs-ovs exited %d after SIGTERM, want 0", code)
	}
	if strings.Count(n.output.String(), "waiting for kovs-agent") != before {
		t.Errorf("kovs-ovs waited for an agent that marked no uninstall:\n%s", n.output.String())
	}
}

// Another Open vSwitch serves the node's directories (the previous release's, a sidecar of
// the agent's pod): a new kovs-ovs starts neither daemon until that one has stopped, then
// starts its own. Without the wait its ovs-vswitchd came up beside the running one and could
// not open the userspace datapath (an upgrade's agents then failed on br-int).
func TestWaitsForAnotherOVS(t *testing.T) {
	previous := newNode(t)
	previous.start()
	previous.waitReady()
	db, vswitchd := previous.pid("ovsdb-server"), previous.pid("ovs-vswitchd")

	next := previous.sibling()
	next.start()
	waitOutput(t, next, "another ovsdb-server serves this node's database socket")
	if strings.Contains(next.output.String(), "started") {
		t.Fatalf("kovs-ovs started a daemon while another OVS serves the node:\n%s", next.output.String())
	}
	if !alive(db) || !alive(vswitchd) {
		t.Fatalf("the running OVS was disturbed: ovsdb-server alive %v, ovs-vswitchd alive %v", alive(db), alive(vswitchd))
	}

	previous.signal(syscall.SIGTERM)
	if code := previous.waitExit(30 * time.Second); code != 0 {
		t.Fatalf("the previous kovs-ovs exited %d", code)
	}
	waitOutput(t, next, "the other Open vSwitch stopped")
	next.waitReady()
	if next.pid("ovs-vswitchd") == vswitchd || next.pid("ovsdb-server") == db {
		t.Fatal("the probe passes on the previous daemons' pids")
	}
	next.vsctl("add-br", "br-test", "--", "set", "Bridge", "br-test", "datapath_type=netdev")
	if _, err := os.Stat(filepath.Join(next.runDir(), "br-test.mgmt")); err != nil {
		t.Errorf("the new ovs-vswitchd made no management socket for br-test (it could not open the datapath?): %v", err)
	}
}
