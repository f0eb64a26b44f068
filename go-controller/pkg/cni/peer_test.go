package cni

import (
	"context"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
)

// TestExistingSocketDirectoryIsMadeRootOnly: a socket directory that exists with looser
// permissions (a hostPath created 0755 or worse) becomes 0700; one another user owns is
// refused (issue 14).
func TestExistingSocketDirectoryIsMadeRootOnly(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "run")
	if err := os.Mkdir(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o777); err != nil { // past the umask
		t.Fatal(err)
	}
	srv, err := NewServer(filepath.Join(dir, "cni.sock"), &fakeHandler{}, quietLog())
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = srv.Close() }()
	info, err := os.Stat(dir)
	if err != nil {
		t.Fatal(err)
	}
	if info.Mode().Perm() != 0o700 {
		t.Errorf("the socket directory that existed 0777 is %v, want 0700", info.Mode().Perm())
	}
	if os.Geteuid() != 0 {
		return // chown needs root; make unit runs as root
	}
	other := filepath.Join(t.TempDir(), "other")
	if err := os.Mkdir(other, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(other, 65534, 65534); err != nil {
		t.Fatal(err)
	}
	if _, err := NewServer(filepath.Join(other, "cni.sock"), &fakeHandler{}, quietLog()); err == nil {
		t.Error("NewServer served from a directory another user owns")
	}
}

// TestOnlyRootMayTalkToTheAgent: with the socket's permissions loosened (a bind mount,
// a chmod), a process that is not root still gets nothing: its connection is closed on
// peer credentials (issue 14). Root only: the test connects with the effective uid of
// nobody (65534) and changes back.
func TestOnlyRootMayTalkToTheAgent(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: it connects as another user (make unit runs as root)")
	}
	client, path := serve(t, &fakeHandler{})
	for p := path; p != os.TempDir() && p != "/"; p = filepath.Dir(p) {
		if err := os.Chmod(p, 0o777); err != nil {
			t.Fatal(err)
		}
	}
	if err := client.Status(context.Background()); err != nil {
		t.Fatalf("root's request: %v", err)
	}
	err := asNobody(t, func() error { return NewClient(path).Status(context.Background()) })
	if err == nil {
		t.Fatal("a process running as nobody was served")
	}
	if strings.Contains(err.Error(), "permission denied") {
		t.Fatalf("nobody could not even reach the socket (%v): the test's premise, a loosened mode, failed", err)
	}
	if err := client.Status(context.Background()); err != nil {
		t.Errorf("root's request after the refusal: %v", err)
	}
}

// asNobody runs f with effective uid and gid 65534, keeping root as the saved uid so
// that the test can change back (every thread of the process changes: the test runs
// alone).
func asNobody(t *testing.T, f func() error) error {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if err := syscall.Setresgid(-1, 65534, -1); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Setresuid(-1, 65534, -1); err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := syscall.Setresuid(-1, 0, -1); err != nil {
			panic(err)
		}
		if err := syscall.Setresgid(-1, 0, -1); err != nil {
			panic(err)
		}
	}()
	return f()
}
