// Package ovstest starts a private Open vSwitch (ovsdb-server and ovs-vswitchd
// on the userspace datapath) for integration tests. It needs root and the OVS
// binaries; RequireOVS skips the test with a message saying which is missing.
//
// Every rig lives in its own temporary directory, which is also its OVS_RUNDIR,
// OVS_LOGDIR and OVS_DBDIR: the OpenFlow management socket of bridge br-int is
// <Dir>/br-int.mgmt. ovs-vswitchd runs in a network namespace of its own, which
// dies with it: the tap devices of the userspace datapath (ovs-netdev, one per
// internal port) stay out of the test's namespace and cannot collide with
// another rig's. Cleanup stops only the processes the rig started, and
// prints the tail of their logs when the test failed.
package ovstest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Paths of the Debian openvswitch-switch package.
const (
	schemaPath = "/usr/share/openvswitch/vswitch.ovsschema"
	startWait  = 20 * time.Second
)

// Rig is one private Open vSwitch.
type Rig struct {
	// Dir holds the database, sockets and logs; it is OVS_RUNDIR.
	Dir string
	// DBSocket is the path of ovsdb-server's unix socket.
	DBSocket string
	// VswitchdCtl is the path of ovs-vswitchd's unixctl socket (ovs-appctl -t).
	VswitchdCtl string

	ovsdb    *exec.Cmd
	vswitchd *exec.Cmd
}

// RequireOVS skips the test unless it runs as root with the OVS binaries installed.
func RequireOVS(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("skipping: needs root to run ovsdb-server and ovs-vswitchd (run `go test` as root)")
	}
	for _, bin := range []string{"ovsdb-tool", "ovsdb-server", "ovs-vswitchd", "ovs-vsctl", "ovs-ofctl", "ovs-appctl"} {
		if _, err := exec.LookPath(bin); err != nil {
			t.Skipf("skipping: %s not found (install openvswitch-switch)", bin)
		}
	}
	if _, err := os.Stat(schemaPath); err != nil {
		t.Skipf("skipping: no OVS schema at %s", schemaPath)
	}
}

// Start creates a database, initializes it (ovs-vsctl --no-wait init) and
// starts ovsdb-server and ovs-vswitchd. It skips the test (see RequireOVS)
// when it cannot run.
func Start(t testing.TB) *Rig {
	t.Helper()
	r := StartDatabase(t)
	r.Vsctl(t, "--no-wait", "init")
	r.StartVswitchd(t)
	return r
}

// StartVswitchd starts ovs-vswitchd (Start does it; tests call it again after
// StopVswitchd, as an operator's restart would).
func (r *Rig) StartVswitchd(t testing.TB) {
	t.Helper()
	r.vswitchd = r.daemon(t, syscall.CLONE_NEWNET, "ovs-vswitchd", "unix:"+r.DBSocket, "--unixctl="+r.VswitchdCtl)
	r.waitUnixSocket(t, r.VswitchdCtl)
}

// StartVswitchdAsOVSCtl starts ovs-vswitchd as ovs-ctl (host OVS) does: with a pidfile,
// <Dir>/ovs-vswitchd.pid, and its unixctl socket named after its pid,
// <Dir>/ovs-vswitchd.<pid>.ctl, which VswitchdCtl then names. A restart changes the path.
func (r *Rig) StartVswitchdAsOVSCtl(t testing.TB) {
	t.Helper()
	r.vswitchd = r.daemon(t, syscall.CLONE_NEWNET, "ovs-vswitchd", "unix:"+r.DBSocket,
		"--pidfile="+filepath.Join(r.Dir, "ovs-vswitchd.pid"))
	r.VswitchdCtl = filepath.Join(r.Dir, fmt.Sprintf("ovs-vswitchd.%d.ctl", r.vswitchd.Process.Pid))
	r.waitUnixSocket(t, r.VswitchdCtl)
}

// VswitchdPID is ovs-vswitchd's process ID (0 while it is stopped): its network
// namespace, /proc/<pid>/ns/net, holds the taps of the bridges' internal ports.
func (r *Rig) VswitchdPID() int {
	if r.vswitchd == nil || r.vswitchd.Process == nil {
		return 0
	}
	return r.vswitchd.Process.Pid
}

// StopVswitchd stops ovs-vswitchd, leaving ovsdb-server running: the bridges'
// flows and management sockets go with it.
func (r *Rig) StopVswitchd(t testing.TB) {
	t.Helper()
	stopProcess(t, r.vswitchd)
	r.vswitchd = nil
	os.Remove(r.VswitchdCtl)
}

// StartDatabase creates an empty database (no Open_vSwitch row) and starts
// ovsdb-server on it, and no ovs-vswitchd.
func StartDatabase(t testing.TB) *Rig {
	t.Helper()
	RequireOVS(t)
	// A short path: unix socket paths are limited to 107 bytes.
	dir, err := os.MkdirTemp("", "kovs-ovs-")
	if err != nil {
		t.Fatalf("create rig directory: %v", err)
	}
	r := &Rig{Dir: dir, DBSocket: filepath.Join(dir, "db.sock"), VswitchdCtl: filepath.Join(dir, "ovs-vswitchd.ctl")}
	t.Cleanup(func() { r.stop(t) })
	r.run(t, "ovsdb-tool", "create", filepath.Join(dir, "conf.db"), schemaPath)
	r.StartOVSDB(t)
	return r
}

// Endpoint is the OVSDB endpoint of the rig's database.
func (r *Rig) Endpoint() string { return "unix:" + r.DBSocket }

// StartOVSDB starts ovsdb-server on the rig's database (Start does it; tests
// call it again after StopOVSDB).
func (r *Rig) StartOVSDB(t testing.TB) {
	t.Helper()
	r.ovsdb = r.daemon(t, 0, "ovsdb-server", filepath.Join(r.Dir, "conf.db"),
		"--remote=punix:"+r.DBSocket, "--unixctl="+filepath.Join(r.Dir, "ovsdb-server.ctl"))
	r.waitUnixSocket(t, r.DBSocket)
}

// StopOVSDB stops ovsdb-server, leaving ovs-vswitchd running.
func (r *Rig) StopOVSDB(t testing.TB) {
	t.Helper()
	stopProcess(t, r.ovsdb)
	r.ovsdb = nil
}

// Vsctl runs ovs-vsctl against the rig's database and returns its trimmed output.
func (r *Rig) Vsctl(t testing.TB, args ...string) string {
	t.Helper()
	return r.run(t, "ovs-vsctl", append([]string{"--timeout=20", "--db=" + r.Endpoint()}, args...)...)
}

// Ofctl runs ovs-ofctl -O OpenFlow15 cmd against bridge's management socket.
func (r *Rig) Ofctl(t testing.TB, cmd, bridge string, args ...string) string {
	t.Helper()
	target := "unix:" + filepath.Join(r.Dir, bridge+".mgmt")
	return r.run(t, "ovs-ofctl", append([]string{"-O", "OpenFlow15", cmd, target}, args...)...)
}

// Appctl runs ovs-appctl against the rig's ovs-vswitchd.
func (r *Rig) Appctl(t testing.TB, args ...string) string {
	t.Helper()
	return r.run(t, "ovs-appctl", append([]string{"-t", r.VswitchdCtl}, args...)...)
}

func (r *Rig) env() []string {
	return append(os.Environ(), "OVS_RUNDIR="+r.Dir, "OVS_LOGDIR="+r.Dir, "OVS_DBDIR="+r.Dir)
}

func (r *Rig) run(t testing.TB, name string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Env = r.env()
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v: %s", name, strings.Join(args, " "), err, out)
	}
	return strings.TrimSpace(string(out))
}

// daemon starts an OVS daemon in the foreground, as a child that the kernel
// kills if the test binary dies. cloneflags may ask for a new namespace.
func (r *Rig) daemon(t testing.TB, cloneflags uintptr, name string, args ...string) *exec.Cmd {
	t.Helper()
	log := filepath.Join(r.Dir, name+".log")
	args = append(args, "--log-file="+log, "--no-chdir", "-vconsole:off", "-vsyslog:off")
	cmd := exec.Command(name, args...)
	cmd.Env = r.env()
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Cloneflags: cloneflags}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	return cmd
}

func (r *Rig) waitUnixSocket(t testing.TB, path string) {
	t.Helper()
	deadline := time.Now().Add(startWait)
	for {
		conn, err := net.Dial("unix", path)
		if err == nil {
			_ = conn.Close()
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s did not come up within %v: %v", path, startWait, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// stop ends the rig's processes and removes its directory, keeping the logs
// in the test output if the test failed.
func (r *Rig) stop(t testing.TB) {
	stopProcess(t, r.vswitchd)
	stopProcess(t, r.ovsdb)
	if t.Failed() {
		for _, name := range []string{"ovsdb-server", "ovs-vswitchd"} {
			t.Logf("%s log (tail):\n%s", name, tail(filepath.Join(r.Dir, name+".log"), 30))
		}
	}
	if err := os.RemoveAll(r.Dir); err != nil {
		t.Logf("remove rig directory %s: %v", r.Dir, err)
	}
}

// stopProcess sends SIGTERM to a process this package started, then SIGKILL
// if it has not exited after five seconds.
func stopProcess(t testing.TB, cmd *exec.Cmd) {
	if cmd == nil || cmd.Process == nil {
		return
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	_ = cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		_ = cmd.Process.Kill()
		if err := <-done; err != nil && !errors.Is(err, os.ErrProcessDone) {
			t.Logf("%s killed: %v", cmd.Path, err)
		}
	}
}

func tail(path string, lines int) string {
	data, err := os.ReadFile(path)
	if err != nil {
		return fmt.Sprintf("(%v)", err)
	}
	all := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	return strings.Join(all[max(0, len(all)-lines):], "\n")
}
