// Package framework runs kovs end-to-end tests against real sandboxes: a real etcd,
// kube-apiserver, kube-controller-manager and kube-scheduler, and nodes that are network
// namespaces with their own Open vSwitch. Tests using it need root and Linux; they run
// when KOVS_E2E=1 (make e2e sets it) and are skipped otherwise.
package framework

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/kovs-net/kovs/go-controller/pkg/sandbox"
)

// Env locates the binaries the tests run.
type Env struct {
	// BinDir holds kovs-sandbox (and the kovs binaries, once built).
	BinDir string
	// K8sBinDir holds kube-apiserver, kube-controller-manager, kube-scheduler and kubectl.
	K8sBinDir string
}

// Require returns the test environment, skipping the test unless KOVS_E2E=1.
func Require(t testing.TB) Env {
	t.Helper()
	if os.Getenv("KOVS_E2E") != "1" {
		t.Skip("end-to-end test: set KOVS_E2E=1 (make e2e does), needs root")
	}
	if os.Geteuid() != 0 {
		t.Fatal("end-to-end tests need root (network namespaces, OVS)")
	}
	env := Env{BinDir: os.Getenv("KOVS_BIN_DIR"), K8sBinDir: os.Getenv("KOVS_K8S_BIN_DIR")}
	for _, f := range []string{filepath.Join(env.BinDir, "kovs-sandbox"), filepath.Join(env.K8sBinDir, "kubectl")} {
		if _, err := os.Stat(f); err != nil {
			t.Fatalf("%s missing: run `make build k8s` or set KOVS_BIN_DIR / KOVS_K8S_BIN_DIR", f)
		}
	}
	return env
}

// Sandbox is one running sandbox under test.
type Sandbox struct {
	t      testing.TB
	env    Env
	Layout sandbox.Layout
	Client kubernetes.Interface
}

// UniqueName returns a fresh sandbox name for this run ("e" + 6 hex digits).
func UniqueName() string {
	b := make([]byte, 3)
	_, _ = rand.Read(b)
	return "e" + hex.EncodeToString(b)
}

// Up starts a sandbox with a unique name and the given `up` flags, and removes it when the
// test ends, pass or fail.
func Up(t testing.TB, env Env, flags ...string) *Sandbox {
	t.Helper()
	s := New(t, env, UniqueName())
	t.Cleanup(func() {
		if t.Failed() {
			s.dumpLogs()
		}
		if out, err := s.Run("down"); err != nil {
			t.Errorf("down: %v\n%s", err, out)
		}
	})
	if out, err := s.Run(append([]string{"up"}, flags...)...); err != nil {
		t.Fatalf("up %v: %v\n%s", flags, err, out)
	}
	client, err := s.Layout.Client()
	if err != nil {
		t.Fatal(err)
	}
	s.Client = client
	return s
}

// New refers to a sandbox by name without starting it.
func New(t testing.TB, env Env, name string) *Sandbox {
	l, err := sandbox.NewLayout(name, sandbox.DefaultRoot)
	if err != nil {
		t.Fatal(err)
	}
	return &Sandbox{t: t, env: env, Layout: l}
}

// Command builds a kovs-sandbox command for this sandbox.
func (s *Sandbox) Command(args ...string) *exec.Cmd {
	cmd := exec.Command(filepath.Join(s.env.BinDir, "kovs-sandbox"), append([]string{"--name", s.Layout.Name}, args...)...)
	cmd.Env = append(os.Environ(), "KOVS_K8S_BIN_DIR="+s.env.K8sBinDir)
	return cmd
}

// Run runs kovs-sandbox with args and returns its combined output.
func (s *Sandbox) Run(args ...string) (string, error) {
	out, err := s.Command(args...).CombinedOutput()
	return string(out), err
}

// Kubectl runs the sandbox's kubectl against its kube-apiserver.
func (s *Sandbox) Kubectl(args ...string) (string, error) {
	cmd := exec.Command(filepath.Join(s.env.K8sBinDir, "kubectl"), args...)
	cmd.Env = append(os.Environ(), "KUBECONFIG="+s.Layout.Kubeconfig())
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return out.String(), err
}

// Apply runs kubectl apply on a manifest.
func (s *Sandbox) Apply(manifest string) {
	s.t.Helper()
	cmd := exec.Command(filepath.Join(s.env.K8sBinDir, "kubectl"), "apply", "-f", "-")
	cmd.Env = append(os.Environ(), "KUBECONFIG="+s.Layout.Kubeconfig())
	cmd.Stdin = strings.NewReader(manifest)
	if out, err := cmd.CombinedOutput(); err != nil {
		s.t.Fatalf("kubectl apply: %v\n%s\n%s", err, out, manifest)
	}
}

func (s *Sandbox) dumpLogs() {
	var files []string
	entries, _ := os.ReadDir(s.Layout.LogDir())
	for _, e := range entries {
		files = append(files, filepath.Join(s.Layout.LogDir(), e.Name()))
	}
	// Each emulated node's ovs-vswitchd and ovsdb-server write their own log files (their
	// stdout in the log directory says little): their warnings are what tells a datapath
	// fault from a kovs one.
	ovsLogs, _ := filepath.Glob(filepath.Join(s.Layout.Dir(), "nodes", "*", "ovs", "*.log"))
	files = append(files, ovsLogs...)
	for _, f := range files {
		name, _ := filepath.Rel(s.Layout.Dir(), f)
		b, _ := os.ReadFile(f)
		lines := strings.Split(strings.TrimSpace(string(b)), "\n")
		// kovs's and OVS's warnings and errors say more than their last lines, which are
		// mostly routine: the last of them come first.
		var warned []string
		for _, l := range lines {
			if warning(l) {
				warned = append(warned, l)
			}
		}
		if len(warned) > 0 {
			s.t.Logf("--- %s (its last warnings and errors) ---\n%s", name, strings.Join(lastLines(warned, 30), "\n"))
		}
		s.t.Logf("--- %s (last lines) ---\n%s", name, strings.Join(lastLines(lines, 15), "\n"))
	}
}

// warning reports whether a log line is a warning or an error: kovs's (logrus) or OVS's
// (vlog), but for the one OVS warning every run has (no kernel datapath on these hosts).
func warning(l string) bool {
	switch {
	case strings.Contains(l, "failed to enumerate system datapaths"):
		return false
	case strings.Contains(l, "level=warning"), strings.Contains(l, "level=error"), strings.Contains(l, "level=fatal"):
		return true
	}
	return strings.Contains(l, "|WARN|") || strings.Contains(l, "|ERR|") || strings.Contains(l, "|EMER|")
}

// lastLines is the last n of lines (all of them if fewer).
func lastLines(lines []string, n int) []string {
	return lines[max(len(lines)-n, 0):]
}

// Eventually polls check until it returns nil or the timeout passes, then fails the test
// with the last error.
func Eventually(t testing.TB, timeout time.Duration, what string, check func() error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		err := check()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s: %v", timeout, what, err)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// Context returns a context that ends with the test.
func Context(t testing.TB) context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	return ctx
}

// Errorf is fmt.Errorf, for check functions.
var Errorf = fmt.Errorf

// K8sBinDir is where kubectl and the control plane binaries are.
func (s *Sandbox) K8sBinDir() string { return s.env.K8sBinDir }

// TokenKubeconfig writes (once) a kubeconfig with the sandbox's server and CA and no
// credentials, for kubectl --token: requests are then made as the token's identity only.
func (s *Sandbox) TokenKubeconfig() string {
	path := filepath.Join(s.Layout.Dir(), "token-kubeconfig")
	if _, err := os.Stat(path); err == nil {
		return path
	}
	cfg, err := clientcmd.LoadFromFile(s.Layout.Kubeconfig())
	if err != nil {
		s.t.Fatal(err)
	}
	for _, a := range cfg.AuthInfos {
		a.ClientCertificateData, a.ClientKeyData = nil, nil
	}
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		s.t.Fatal(err)
	}
	return path
}

// Upgrade moves the sandbox's kovs to the release of to (`kovs-sandbox upgrade` of to's
// binaries: its images and dist/, docs/upgrades.md's order) and from then on drives the
// sandbox with to's kovs-sandbox, `down` included. It returns the command's output.
func (s *Sandbox) Upgrade(t testing.TB, to Env, flags ...string) string {
	t.Helper()
	s.env = to
	out, err := s.Run(append([]string{"upgrade"}, flags...)...)
	if err != nil {
		t.Fatalf("upgrade to %s: %v\n%s", to.BinDir, err, out)
	}
	return out
}
