package sandbox

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"time"
)

// stopOrder ranks processes by the suffix of their name: node emulators and kubelets
// first (they would otherwise keep recreating pods), then the containers of real nodes
// (podsRank), containerd, kube-proxy and kovs, the relays and the control plane, and a
// real node's mount namespace and OVS last.
var stopOrder = []string{"emulator", "kubelet", "containerd", "kube-proxy", "kovs-agent", "kovs-controller", relaysProcess,
	"kube-scheduler", "kube-controller-manager", "kube-apiserver", "etcd", "host", "ovs-vswitchd", "ovsdb-server"}

// podsRank is where the containers of real nodes are killed: once their kubelets stopped.
const podsRank = 2

func stopRank(name string) int {
	for i, suffix := range stopOrder {
		if strings.HasSuffix(name, suffix) {
			return i
		}
	}
	return podsRank - 1
}

// Down stops every process of the sandbox, the containers of its real nodes, deletes its
// network namespaces, cgroups and state directory. It works from whatever Up left behind,
// including a crashed Up, and is idempotent.
func Down(l Layout, out io.Writer) error {
	names := l.processNames()
	sort.SliceStable(names, func(i, j int) bool { return stopRank(names[i]) < stopRank(names[j]) })
	var errs []error
	podsKilled := false
	for _, n := range names {
		if !podsKilled && stopRank(n) >= podsRank {
			errs = append(errs, l.killContainers(out)...)
			podsKilled = true
		}
		if err := l.stop(n, 5*time.Second); err != nil {
			errs = append(errs, err)
		} else {
			fmt.Fprintf(out, "stopped %s\n", n)
		}
	}
	if !podsKilled {
		errs = append(errs, l.killContainers(out)...)
	}
	// Anything still carrying our marker (a child whose pid file was never written, the
	// containerd shims of real nodes).
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

// killContainers kills the containers of the sandbox's real nodes, which outlive kubelet
// and containerd, through their cgroups, and removes those cgroups.
func (l Layout) killContainers(out io.Writer) []error {
	var errs []error
	for _, root := range l.cgroupRoots() {
		if err := killCgroupTree(context.Background(), root); err != nil {
			errs = append(errs, err)
		} else {
			fmt.Fprintf(out, "removed cgroup %s\n", root)
		}
	}
	return errs
}

// cgroupRoots lists the cgroup roots of this sandbox's real nodes that exist.
func (l Layout) cgroupRoots() []string {
	seen := map[string]bool{}
	var roots []string
	for _, h := range cgroupHierarchies() {
		dirs, _ := filepath.Glob(filepath.Join(h, l.NetNSPrefix()+"*"))
		for _, d := range dirs {
			if r := "/" + filepath.Base(d); !seen[r] {
				seen[r] = true
				roots = append(roots, r)
			}
		}
	}
	sort.Strings(roots)
	return roots
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

// RemoveNode tears one emulated node down as a lost machine: every process of the node
// (its emulator, OVS, agent) stopped at once (SIGTERM, then SIGKILL without a grace period), its pod namespaces and its own
// network namespace (with its underlay link) deleted. The Node object stays: deleting it
// is the test's next step, as an operator's. Down still removes the rest of the sandbox.
func (l Layout) RemoveNode(node string) error {
	var errs []error
	for _, n := range l.processNames() {
		if strings.HasPrefix(n, node+"-") {
			if err := l.stop(n, 0); err != nil {
				errs = append(errs, err)
			}
		}
	}
	for _, ns := range l.NetNamespaces() {
		if strings.HasPrefix(ns, l.PodNetNSPrefix(node)) || ns == l.NodeNetNS(node) {
			if err := run("ip", "netns", "delete", ns); err != nil {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}
