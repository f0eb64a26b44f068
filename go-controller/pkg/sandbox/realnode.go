package sandbox

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"
)

// Runtime is what runs the pods of the sandbox's nodes.
type Runtime string

const (
	// RuntimeEmulator is the node emulator: kubelet's visible work and the CNI calls of a
	// runtime, with a responder in each pod (the fast default, for the truth tables).
	RuntimeEmulator Runtime = "emulator"
	// RuntimeContainerd is a real node: kubelet, containerd and runc, images built here.
	RuntimeContainerd Runtime = "containerd"
)

// ParseRuntime accepts emulator or containerd.
func ParseRuntime(s string) (Runtime, error) {
	switch r := Runtime(s); r {
	case RuntimeEmulator, RuntimeContainerd:
		return r, nil
	}
	return "", fmt.Errorf("runtime %q: use emulator or containerd", s)
}

// realNodeTools are the programs a real node needs, with the Debian package of each.
var realNodeTools = map[string]string{
	"containerd": "containerd", "ctr": "containerd", "runc": "runc", "nsenter": "util-linux",
}

// hostCNIPlugins is where Debian's containernetworking-plugins puts the reference CNI
// plugins. A node's OS provides them in /opt/cni/bin (kind's node image and kubeadm's
// kubernetes-cni package do): containerd runs loopback for every pod sandbox.
const hostCNIPlugins = "/usr/lib/cni"

// nodeOSPlugins are the reference plugins a real node's /opt/cni/bin starts with.
var nodeOSPlugins = []string{"loopback", "portmap", "bandwidth", "host-local"}

// validateRealNodes checks what `--runtime containerd` needs before anything starts.
func (o *Options) validateRealNodes() error {
	for tool, pkg := range realNodeTools {
		if _, err := exec.LookPath(tool); err != nil {
			return fmt.Errorf("--runtime containerd: %s is missing (apt-get install %s, or `make tools`)", tool, pkg)
		}
	}
	for _, p := range nodeOSPlugins {
		if _, err := os.Stat(filepath.Join(hostCNIPlugins, p)); err != nil {
			return fmt.Errorf("--runtime containerd: %s is missing (apt-get install containernetworking-plugins, or `make tools`)", filepath.Join(hostCNIPlugins, p))
		}
	}
	if _, err := os.Stat(filepath.Join(o.K8sBinDir, "kubelet")); err != nil {
		return fmt.Errorf("--runtime containerd: %s is missing: run `make k8s` (hack/build-k8s.sh builds kubelet)", filepath.Join(o.K8sBinDir, "kubelet"))
	}
	archives, err := imageArchives(o.ImagesDir)
	if err != nil {
		return err
	}
	if len(archives) == 0 {
		return fmt.Errorf("--runtime containerd: no image archives (*.tar) in %q: run `make images`", o.ImagesDir)
	}
	if o.KovsBinDir != "" {
		if _, err := os.Stat(filepath.Join(o.DistDir, "kustomization.yaml")); err != nil {
			return fmt.Errorf("--runtime containerd installs kovs from dist/ with kubectl apply -k: %s has no kustomization.yaml (set --dist)", o.DistDir)
		}
	}
	return nil
}

// imageArchives lists the OCI image archives of dir, sorted.
func imageArchives(dir string) ([]string, error) {
	if dir == "" {
		return nil, errors.New("--runtime containerd: no images directory given (--images)")
	}
	archives, err := filepath.Glob(filepath.Join(dir, "*.tar"))
	if err != nil {
		return nil, err
	}
	sort.Strings(archives)
	return archives, nil
}

// realNode turns node n, whose namespace, uplink and OVS exist, into a real node: its
// mount namespace, cgroup root, containerd with every image imported, ready for its
// kubelet (startKubelet, once the relays serve kube-apiserver inside the node).
func (u *upRun) realNode(n Node) error {
	if err := u.writeRealNodeConfig(n); err != nil {
		return err
	}
	for _, p := range nodeOSPlugins {
		if err := copyFile(filepath.Join(hostCNIPlugins, p), filepath.Join(u.layout.CNIBinDir(n.Name), p)); err != nil {
			return fmt.Errorf("node %s: CNI plugin %s: %w", n.Name, p, err)
		}
	}
	if err := createCgroupRoot(u.layout.CgroupRoot(n.Name)); err != nil {
		return fmt.Errorf("node %s cgroups: %w", n.Name, err)
	}
	if err := u.startNodeHost(n); err != nil {
		return err
	}
	return u.startContainerd(n)
}

func containerdProcess(node string) string { return node + "-containerd" }

// KubeletProcess is the process name of a real node's kubelet.
func KubeletProcess(node string) string { return node + "-kubelet" }

func (u *upRun) startContainerd(n Node) error {
	l := u.layout
	name := containerdProcess(n.Name)
	if _, err := l.start(Process{Name: name, Path: "containerd", NetNS: l.NodeNetNS(n.Name), MountNSOf: nodeHostProcess(n.Name),
		Args: []string{"--config", filepath.Join(l.NodeDir(n.Name), "containerd.toml")}}); err != nil {
		return err
	}
	return u.waitWhileRunning(name, 30*time.Second, "containerd of "+n.Name+" to answer", func() error {
		return run("ctr", "--address", l.ContainerdSocket(n.Name), "version")
	})
}

// importImages imports every image archive into the containerd of every real node, the
// nodes in parallel, under the names the archives carry: kubelet then finds them
// (imagePullPolicy IfNotPresent) and never asks a registry.
func (u *upRun) importImages() error {
	archives, err := imageArchives(u.opts.ImagesDir)
	if err != nil {
		return err
	}
	var wg sync.WaitGroup
	errs := make([]error, len(u.state.Nodes))
	for i, n := range u.state.Nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for _, a := range archives {
				if err := run("ctr", "--address", u.layout.ContainerdSocket(n.Name), "-n", "k8s.io", "images", "import", a); err != nil {
					errs[i] = fmt.Errorf("import %s into %s: %w", filepath.Base(a), n.Name, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// startKubelets starts every node's kubelet in the node's network and mount namespaces.
func (u *upRun) startKubelets() error {
	l := u.layout
	for _, n := range u.state.Nodes {
		if _, err := l.start(Process{Name: KubeletProcess(n.Name), Path: filepath.Join(u.opts.K8sBinDir, "kubelet"),
			NetNS: l.NodeNetNS(n.Name), MountNSOf: nodeHostProcess(n.Name), Args: u.kubeletArgs(n)}); err != nil {
			return err
		}
	}
	return nil
}

// relaysProcess serves kube-apiserver inside every node and its egress proxy.
const relaysProcess = "relays"

// startRelays starts the relays process and waits until kube-apiserver answers inside
// every node.
func (u *upRun) startRelays() error {
	if _, err := u.layout.start(Process{Name: relaysProcess, Path: u.opts.SelfPath, Args: []string{
		"--name", u.layout.Name, "--root", u.layout.Root, "relays",
	}}); err != nil {
		return err
	}
	return u.waitWhileRunning(relaysProcess, 20*time.Second, "kube-apiserver to answer inside every node", func() error {
		for _, n := range u.state.Nodes {
			if err := runIn(u.layout.NodeNetNS(n.Name), "bash", "-c", fmt.Sprintf("exec 3<>/dev/tcp/127.0.0.1/%d", NodeAPIServerPort)); err != nil {
				return fmt.Errorf("node %s: %w", n.Name, err)
			}
		}
		return nil
	})
}

// cgroupHierarchies are the cgroup v1 hierarchies of the machine (not the unified one).
func cgroupHierarchies() []string {
	dirs, _ := filepath.Glob("/sys/fs/cgroup/*")
	var out []string
	for _, d := range dirs {
		if filepath.Base(d) == "unified" {
			continue
		}
		if _, err := os.Stat(filepath.Join(d, "cgroup.procs")); err == nil {
			out = append(out, d)
		}
	}
	return out
}

// createCgroupRoot creates kubelet's cgroup root in every v1 hierarchy, as kubelet
// insists ("cgroup [...] has some missing paths"); a new cpuset cgroup gets its parent's
// CPUs and memory nodes, or no process could join it.
func createCgroupRoot(root string) error {
	for _, h := range cgroupHierarchies() {
		dir := filepath.Join(h, root)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return err
		}
		if filepath.Base(h) != "cpuset" {
			continue
		}
		for _, f := range []string{"cpuset.cpus", "cpuset.mems"} {
			b, err := os.ReadFile(filepath.Join(h, f))
			if err != nil {
				return err
			}
			if err := os.WriteFile(filepath.Join(dir, f), b, 0o644); err != nil {
				return fmt.Errorf("%s: %w", filepath.Join(dir, f), err)
			}
		}
	}
	return nil
}

// killCgroupTree kills every process in the cgroups under root (the containers of a real
// node, which outlive kubelet and containerd) and removes the cgroups, deepest first.
func killCgroupTree(ctx context.Context, root string) error {
	hs := cgroupHierarchies()
	deadline := time.Now().Add(10 * time.Second)
	for {
		left := 0
		for _, h := range hs {
			left += signalCgroupTree(filepath.Join(h, root))
		}
		if left == 0 {
			break
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("%d processes of cgroup %s would not die", left, root)
		}
		time.Sleep(100 * time.Millisecond)
	}
	var errs []error
	for _, h := range hs {
		if err := removeCgroupTree(filepath.Join(h, root)); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// signalCgroupTree SIGKILLs every process in dir and below, and returns how many there
// were.
func signalCgroupTree(dir string) int {
	n := 0
	_ = filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if err != nil || !d.IsDir() {
			return nil
		}
		b, _ := os.ReadFile(filepath.Join(path, "cgroup.procs"))
		for _, f := range strings.Fields(string(b)) {
			var pid int
			if _, err := fmt.Sscan(f, &pid); err == nil && pid > 1 {
				n++
				_ = killPID(pid)
			}
		}
		return nil
	})
	return n
}

// removeCgroupTree removes dir and the cgroups below it (a cgroup directory is removed
// with rmdir, deepest first).
func removeCgroupTree(dir string) error {
	var dirs []string
	_ = filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			dirs = append(dirs, path)
		}
		return nil
	})
	var errs []error
	for i := len(dirs) - 1; i >= 0; i-- {
		if err := os.Remove(dirs[i]); err != nil && !os.IsNotExist(err) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
