package sandbox

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// nodeHostProcess is the process holding a real node's mount namespace.
func nodeHostProcess(node string) string { return node + "-host" }

// kubeletSysctls are the kernel settings kubelet insists on at start (its
// setupKernelTunables): it writes them when they differ, and fails if it cannot. They are
// global to the machine, not per node, so a node's kubelet must not change them: the
// node's mount namespace shows kubelet these values instead (a file of the node bound
// over each /proc/sys entry that differs), and the machine keeps its own.
var kubeletSysctls = map[string]int{
	"vm/overcommit_memory":      1,
	"vm/panic_on_oom":           0,
	"kernel/panic":              10,
	"kernel/panic_on_oops":      1,
	"kernel/keys/root_maxkeys":  1000000,
	"kernel/keys/root_maxbytes": 25000000,
}

// RunNodeHost prepares the mount namespace of a real node and holds it until ctx ends. It
// must be the first process of a new mount namespace (Process.NewMountNS): it binds the
// node's directories over the host paths (Layout.NodeBinds) and masks the kubelet
// sysctls, then makes every mount shared again inside the namespace (as on a systemd
// host), so containerd can give pods HostToContainer propagation. kubelet, containerd and
// everything they start enter this namespace (Process.MountNSOf).
func RunNodeHost(ctx context.Context, l Layout, node string) error {
	if err := ownMountNS(); err != nil {
		return err
	}
	ready := l.nodeHostReadyFile(node)
	_ = os.Remove(ready)
	for _, b := range l.NodeBinds(node) {
		if err := bindDir(b); err != nil {
			return err
		}
	}
	if err := maskKubeletSysctls(l.nodePath(node, "sysctl")); err != nil {
		return err
	}
	if err := syscall.Mount("", "/", "", syscall.MS_REC|syscall.MS_SHARED, ""); err != nil {
		return fmt.Errorf("make the node's mounts shared: %w", err)
	}
	if err := os.WriteFile(ready, []byte(strconv.Itoa(os.Getpid())+"\n"), 0o644); err != nil {
		return err
	}
	<-ctx.Done()
	return nil
}

// ownMountNS refuses to bind anything in the mount namespace of the process that started
// it (the machine's): binds over /etc/cni/net.d or /var/lib/kubelet there would hide the
// host's.
func ownMountNS() error {
	self, err := os.Readlink("/proc/self/ns/mnt")
	if err != nil {
		return err
	}
	parent, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/mnt", os.Getppid()))
	if err != nil {
		return err
	}
	if self == parent {
		return fmt.Errorf("node-host runs in the mount namespace of its parent (%s): it must be started in a new one (kovs-sandbox up does)", self)
	}
	return nil
}

func bindDir(b Bind) error {
	for _, d := range []string{b.Source, b.Target} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return fmt.Errorf("bind %s over %s: %w", b.Source, b.Target, err)
		}
	}
	if err := syscall.Mount(b.Source, b.Target, "", syscall.MS_BIND|syscall.MS_REC, ""); err != nil {
		return fmt.Errorf("bind %s over %s: %w", b.Source, b.Target, err)
	}
	return nil
}

// maskKubeletSysctls binds a file with kubelet's wanted value over every kubelet sysctl
// whose machine value differs.
func maskKubeletSysctls(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for key, want := range kubeletSysctls {
		target := filepath.Join("/proc/sys", key)
		b, err := os.ReadFile(target)
		if err != nil {
			return fmt.Errorf("read %s: %w", target, err)
		}
		if strings.TrimSpace(string(b)) == strconv.Itoa(want) {
			continue
		}
		src := filepath.Join(dir, strings.ReplaceAll(key, "/", "."))
		if err := os.WriteFile(src, []byte(strconv.Itoa(want)+"\n"), 0o644); err != nil {
			return err
		}
		if err := syscall.Mount(src, target, "", syscall.MS_BIND, ""); err != nil {
			return fmt.Errorf("mask %s for kubelet: %w", target, err)
		}
	}
	return nil
}

func (l Layout) nodeHostReadyFile(node string) string {
	return filepath.Join(l.NodeDir(node), "host.ready")
}

// startNodeHost starts the holder of node's mount namespace and waits until its mounts
// are in place.
func (u *upRun) startNodeHost(n Node) error {
	name := nodeHostProcess(n.Name)
	if _, err := u.layout.start(Process{Name: name, Path: u.opts.SelfPath, NewMountNS: true, Args: []string{
		"--name", u.layout.Name, "--root", u.layout.Root, "node-host", "--node", n.Name,
	}}); err != nil {
		return err
	}
	return u.waitWhileRunning(name, 20*time.Second, "the mount namespace of "+n.Name, func() error {
		_, err := os.Stat(u.layout.nodeHostReadyFile(n.Name))
		return err
	})
}
