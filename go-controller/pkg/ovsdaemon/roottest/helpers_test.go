package roottest

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// repoRoot is the repository root, from this package's directory.
const repoRoot = "../../../.."

var build struct {
	once sync.Once
	bin  string
	err  error
}

// kovsOVS builds go-controller/cmd/kovs-ovs once per test binary.
func kovsOVS(t *testing.T) string {
	t.Helper()
	build.once.Do(func() {
		dir, err := os.MkdirTemp("", "kovs-ovs-test-")
		if err != nil {
			build.err = err
			return
		}
		build.bin = filepath.Join(dir, "kovs-ovs")
		out, err := exec.Command("go", "build", "-buildvcs=false", "-o", build.bin, "./go-controller/cmd/kovs-ovs").CombinedOutput()
		if err != nil {
			build.err = fmt.Errorf("go build kovs-ovs: %v: %s", err, out)
		}
	})
	if build.err != nil {
		t.Fatal(build.err)
	}
	return build.bin
}

func TestMain(m *testing.M) {
	if err := os.Chdir(repoRoot); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	if build.bin != "" {
		os.RemoveAll(filepath.Dir(build.bin))
	}
	os.Exit(code)
}

// requireRoot skips unless root; as root, what the tests need must be there.
func requireRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: runs ovsdb-server and ovs-vswitchd in a network namespace (run `go test` as root)")
	}
	for _, bin := range []string{"ovsdb-server", "ovs-vswitchd", "ovsdb-tool", "ovsdb-client", "ovs-vsctl", "ovs-appctl", "ip", "nsenter", "go"} {
		if _, err := exec.LookPath(bin); err != nil {
			t.Fatalf("%s not found: install openvswitch-switch, iproute2 and util-linux (make deps)", bin)
		}
	}
}

// node is one kovs-ovs setup: its directories and network namespace.
type node struct {
	t      *testing.T
	dir    string
	netns  string
	proc   *exec.Cmd
	done   chan struct{}
	exit   error
	output *syncBuffer
	// extra are more kovs-ovs flags for the next start.
	extra []string
}

// newNode makes the directories and the network namespace kovs-imgovs-<random>, and
// removes them when the test ends.
func newNode(t *testing.T) *node {
	t.Helper()
	requireRoot(t)
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	n := &node{t: t, dir: t.TempDir(), netns: "kovs-imgovs-" + hex.EncodeToString(b)}
	if out, err := exec.Command("ip", "netns", "add", n.netns).CombinedOutput(); err != nil {
		t.Fatalf("ip netns add %s: %v: %s", n.netns, err, out)
	}
	t.Cleanup(func() {
		n.kill()
		if out, err := exec.Command("ip", "netns", "del", n.netns).CombinedOutput(); err != nil {
			t.Errorf("ip netns del %s: %v: %s", n.netns, err, out)
		}
	})
	return n
}

func (n *node) runDir() string { return filepath.Join(n.dir, "run") }
func (n *node) dbFile() string { return filepath.Join(n.dir, "etc", "conf.db") }
func (n *node) idFile() string { return filepath.Join(n.dir, "etc", "system-id.conf") }

func (n *node) flags() []string {
	return append([]string{"--db-file=" + n.dbFile(), "--run-dir=" + n.runDir(), "--system-id-file=" + n.idFile(), "--load-kernel-module=false"}, n.extra...)
}

// start runs kovs-ovs in the node's network namespace (nsenter execs it: the process is
// kovs-ovs itself, so signals reach it directly).
func (n *node) start() { n.startWith() }

// startWith runs kovs-ovs under wrapper (a command that runs its arguments) in the node's
// network namespace.
func (n *node) startWith(wrapper ...string) {
	n.t.Helper()
	args := append([]string{"--net=/var/run/netns/" + n.netns}, wrapper...)
	args = append(append(args, kovsOVS(n.t)), n.flags()...)
	n.proc = exec.Command("nsenter", args...)
	n.output = &syncBuffer{}
	n.proc.Stdout, n.proc.Stderr = n.output, n.output
	if err := n.proc.Start(); err != nil {
		n.t.Fatal(err)
	}
	n.done = make(chan struct{})
	go func() {
		n.exit = n.proc.Wait()
		close(n.done)
	}()
	n.t.Cleanup(func() {
		if n.t.Failed() {
			n.t.Logf("kovs-ovs output:\n%s", n.output.String())
		}
	})
}

// waitReady waits until kovs-ovs probe passes; it fails the test if kovs-ovs exits first.
func (n *node) waitReady() {
	n.t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		err := n.probe()
		if err == nil {
			return
		}
		select {
		case <-n.done:
			n.t.Fatalf("kovs-ovs exited (%v) before its probe passed (last: %v)", n.exit, err)
		default:
		}
		if time.Now().After(deadline) {
			n.t.Fatalf("kovs-ovs probe still fails after 60s: %v", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// probe runs `kovs-ovs probe` as a kubelet exec probe would, from the same namespace.
func (n *node) probe() error {
	args := []string{"--net=/var/run/netns/" + n.netns, kovsOVS(n.t), "probe", "--run-dir=" + n.runDir()}
	out, err := exec.Command("nsenter", args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%v: %s", err, strings.TrimSpace(string(out)))
	}
	return nil
}

// waitExit waits for kovs-ovs to exit and returns its exit code.
func (n *node) waitExit(timeout time.Duration) int {
	n.t.Helper()
	select {
	case <-n.done:
	case <-time.After(timeout):
		n.t.Fatalf("kovs-ovs still runs %s later", timeout)
	}
	var ee *exec.ExitError
	switch {
	case n.exit == nil:
		return 0
	case errors.As(n.exit, &ee):
		return ee.ExitCode()
	default:
		n.t.Fatalf("kovs-ovs: %v", n.exit)
		return -1
	}
}

func (n *node) signal(sig syscall.Signal) {
	n.t.Helper()
	if err := n.proc.Process.Signal(sig); err != nil {
		n.t.Fatal(err)
	}
}

// kill ends kovs-ovs if the test left it running.
func (n *node) kill() {
	if n.proc == nil || n.proc.Process == nil {
		return
	}
	select {
	case <-n.done:
	default:
		_ = n.proc.Process.Signal(syscall.SIGTERM)
		select {
		case <-n.done:
		case <-time.After(20 * time.Second):
			_ = n.proc.Process.Kill()
			<-n.done
		}
	}
}

// pid reads a daemon's pidfile.
func (n *node) pid(daemon string) int {
	n.t.Helper()
	b, err := os.ReadFile(filepath.Join(n.runDir(), daemon+".pid"))
	if err != nil {
		n.t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		n.t.Fatalf("%s pidfile: %v", daemon, err)
	}
	return pid
}

// waitGone waits until no process has pid (and it is not a zombie left to reap).
func waitGone(t *testing.T, what string, pid int) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		if !alive(pid) {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("%s (pid %d) still runs", what, pid)
}

func alive(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	// The state follows the command name in parentheses; Z is a zombie.
	s := string(b)
	i := strings.LastIndex(s, ")")
	return i < 0 || i+2 >= len(s) || s[i+2] != 'Z'
}

// vsctl runs ovs-vsctl against the node's database.
func (n *node) vsctl(args ...string) string {
	n.t.Helper()
	out, err := exec.Command("ovs-vsctl", append([]string{"--db=unix:" + filepath.Join(n.runDir(), "db.sock"), "--timeout=10"}, args...)...).CombinedOutput()
	if err != nil {
		n.t.Fatalf("ovs-vsctl %v: %v: %s", args, err, out)
	}
	return strings.TrimSpace(string(out))
}

// appctl runs ovs-appctl against ovs-vswitchd: target is a socket path, or a daemon
// name found through the pidfile in the run directory.
func (n *node) appctl(target string, args ...string) (string, error) {
	cmd := exec.Command("ovs-appctl", append([]string{"--timeout=10", "-t", target}, args...)...)
	cmd.Env = append(os.Environ(), "OVS_RUNDIR="+n.runDir())
	out, err := cmd.CombinedOutput()
	return strings.TrimSpace(string(out)), err
}

func (n *node) systemID() string {
	n.t.Helper()
	return strings.Trim(n.vsctl("get", "Open_vSwitch", ".", "external_ids:system-id"), `"`)
}

type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// sibling is another kovs-ovs of the same node: the same directories and network
// namespace (a second OVS of the same host), stopped when the test ends.
func (n *node) sibling() *node {
	s := &node{t: n.t, dir: n.dir, netns: n.netns}
	n.t.Cleanup(s.kill)
	return s
}

// waitOutput waits until kovs-ovs's output has want; it fails the test if kovs-ovs exits
// first or after 60 seconds.
func waitOutput(t *testing.T, n *node, want string) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for !strings.Contains(n.output.String(), want) {
		select {
		case <-n.done:
			t.Fatalf("kovs-ovs exited (%v) before saying %q:\n%s", n.exit, want, n.output.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("kovs-ovs did not say %q within 60s:\n%s", want, n.output.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
}
