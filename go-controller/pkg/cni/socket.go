package cni

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"syscall"
	"time"
)

// Socket permissions: only root may talk to the agent.
const (
	socketDirMode = 0o700
	socketMode    = 0o600
)

// listenSocket listens on path so that the socket is never reachable with looser
// permissions than 0600, even for a moment: it binds in a fresh private directory next to
// path, sets the mode, then renames the socket into place (which also replaces a stale
// socket atomically). It refuses to replace a socket something still serves. The returned
// FileInfo identifies the socket file, so that closing removes it only if it is still
// ours.
func listenSocket(path string) (*net.UnixListener, os.FileInfo, error) {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, socketDirMode); err != nil {
		return nil, nil, fmt.Errorf("create socket directory: %w", err)
	}
	if err := closeSocketDir(dir); err != nil {
		return nil, nil, err
	}
	if err := refuseServedSocket(path); err != nil {
		return nil, nil, err
	}
	private, err := os.MkdirTemp(dir, ".kovs-cni-")
	if err != nil {
		return nil, nil, fmt.Errorf("create socket directory: %w", err)
	}
	defer func() { _ = os.RemoveAll(private) }()
	tmp := filepath.Join(private, "s")
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: tmp, Net: "unix"})
	if err != nil {
		return nil, nil, fmt.Errorf("listen on %s: %w", path, err)
	}
	ln.SetUnlinkOnClose(false)
	info, err := placeSocket(tmp, path)
	if err != nil {
		_ = ln.Close()
		return nil, nil, err
	}
	return ln, info, nil
}

// closeSocketDir makes the socket's directory root-only (0700) even when it existed
// before, with looser permissions (a hostPath created 0755): nobody else may list it,
// or replace the socket. A directory that is a symlink, or that another user owns (who
// could swap the socket), is refused.
func closeSocketDir(dir string) error {
	info, err := os.Lstat(dir)
	if err != nil {
		return fmt.Errorf("socket directory: %w", err)
	}
	if !info.IsDir() {
		return fmt.Errorf("socket directory %s is not a directory (%v): refusing to serve from it", dir, info.Mode().Type())
	}
	if st, ok := info.Sys().(*syscall.Stat_t); ok && int(st.Uid) != os.Geteuid() {
		return fmt.Errorf("socket directory %s is owned by uid %d, not this process's %d: another user could replace the socket; "+
			"give it to root or choose another --cni-socket", dir, st.Uid, os.Geteuid())
	}
	if info.Mode().Perm() != socketDirMode {
		if err := os.Chmod(dir, socketDirMode); err != nil {
			return fmt.Errorf("make socket directory %s root-only: %w", dir, err)
		}
	}
	return nil
}

// placeSocket sets the socket's mode and moves it to path.
func placeSocket(tmp, path string) (os.FileInfo, error) {
	if err := os.Chmod(tmp, socketMode); err != nil {
		return nil, fmt.Errorf("set socket mode: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return nil, fmt.Errorf("place socket at %s: %w", path, err)
	}
	info, err := os.Lstat(path)
	if err != nil {
		return nil, fmt.Errorf("stat socket: %w", err)
	}
	return info, nil
}

// refuseServedSocket returns an error when path exists and is not a stale socket: a
// file of another kind, or a socket another process (another agent) accepts on.
func refuseServedSocket(path string) error {
	info, err := os.Lstat(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("stat %s: %w", path, err)
	}
	if info.Mode().Type() != os.ModeSocket {
		return fmt.Errorf("%s exists and is not a socket", path)
	}
	conn, err := net.DialTimeout("unix", path, time.Second)
	if err != nil {
		return nil // stale: nobody accepts
	}
	_ = conn.Close()
	return fmt.Errorf("another process serves %s (another kovs-agent?)", path)
}

// removeSocket removes path if it is still the socket described by ours.
func removeSocket(path string, ours os.FileInfo) error {
	info, err := os.Lstat(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("stat %s: %w", path, err)
	}
	if !os.SameFile(info, ours) {
		return nil
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("remove %s: %w", path, err)
	}
	return nil
}
