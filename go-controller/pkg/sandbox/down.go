package sandbox

import (
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"syscall"
	"time"
)

// stopOrder ranks processes by the suffix of their name: node emulators first (they would
// otherwise keep recreating pods), then kube-proxy and kovs, the control plane, and OVS
// last.
var stopOrder = []string{"emulator", "kube-proxy", "kovs-agent", "kovs-controller", "kube-scheduler",
	"kube-controller-manager", "kube-apiserver", "etcd", "ovs-vswitchd", "ovsdb-server"}

func stopRank(name string) int {
	for i, suffix := range stopOrder {
		if strings.HasSuffix(name, suffix) {
			return i
		}
	}
	return 1
}

// Down stops every process of the sandbox, deletes its network namespaces and its state
// directory. It works from whatever Up left behind, including a crashed Up, and is
// idempotent.
func Down(l Layout, out io.Writer) error {
	names := l.processNames()
	sort.SliceStable(names, func(i, j int) bool { return stopRank(names[i]) < stopRank(names[j]) })
	var errs []error
	for _, n := range names {
		if err := l.stop(n, 5*time.Second); err != nil {
			errs = append(errs, err)
		} else {
			fmt.Fprintf(out, "stopped %s\n", n)
		}
	}
	// Anything still carrying our marker (a child whose pid file was never written).
	for _, pid := range l.OwnedPIDs() {
		_ = syscall.Kill(pid, syscall.SIGKILL)
		fmt.Fprintf(out, "killed leftover pid %d\n", pid)
	}
	for _, ns := range l.NetNamespaces() {
		if err := run("ip", "netns", "delete", ns); err != nil {
			errs = append(errs, err)
		} else {
			fmt.Fprintf(out, "deleted netns %s\n", ns)
		}
	}
	for _, m := range l.Mounts() {
		if err := syscall.Unmount(m, syscall.MNT_DETACH); err != nil {
			errs = append(errs, fmt.Errorf("unmount %s: %w", m, err))
		}
	}
	if err := os.RemoveAll(l.Dir()); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// NetNamespaces lists the named network namespaces of this sandbox.
func (l Layout) NetNamespaces() []string {
	entries, _ := os.ReadDir("/run/netns")
	var out []string
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), l.NetNSPrefix()) {
			out = append(out, e.Name())
		}
	}
	return out
}

// Mounts lists mount points of this sandbox still in the mount table: its namespaces'
// bind mounts and anything under its state directory.
func (l Layout) Mounts() []string {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil
	}
	var out []string
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) < 5 {
			continue
		}
		mp := f[4]
		if strings.HasPrefix(mp, "/run/netns/"+l.NetNSPrefix()) || strings.HasPrefix(mp, l.Dir()+"/") {
			out = append(out, mp)
		}
	}
	return out
}
