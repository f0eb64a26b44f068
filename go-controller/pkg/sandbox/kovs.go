package sandbox

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
)

// The kovs binaries the sandbox runs, and where each node's agent serves the CNI plugin.
const (
	kovsController = "kovs-controller"
	kovsAgent      = "kovs-agent"
	kovsCNI        = "kovs-cni"
)

// clusterCIDRs are the pod address plans per family (the controller's defaults).
var clusterCIDRs = map[IPFamily][]string{
	IPv4:      {"10.244.0.0/16"},
	IPv6:      {"fd00:10:244::/48"},
	DualStack: {"10.244.0.0/16", "fd00:10:244::/48"},
}

// kovsPresent reports whether all kovs binaries exist in dir.
func kovsPresent(dir string) bool {
	if dir == "" {
		return false
	}
	for _, b := range []string{kovsController, kovsAgent, kovsCNI} {
		if _, err := os.Stat(filepath.Join(dir, b)); err != nil {
			return false
		}
	}
	return true
}

// kovs installs the CNI binary on every node (as the DaemonSet's init container does) and
// starts kovs-controller in the root namespace and a kovs-agent in every node namespace.
// Without the binaries the nodes stay without a network plugin.
func (u *upRun) kovs() error {
	dir := u.opts.KovsBinDir
	if !kovsPresent(dir) {
		fmt.Fprintf(u.opts.Out, "kovs binaries not found in %q: nodes have no network plugin\n", dir)
		return nil
	}
	u.state.KovsBinDir = dir
	l := u.layout
	if _, err := l.start(Process{Name: kovsController, Path: filepath.Join(dir, kovsController), Args: []string{
		"--kubeconfig", l.Kubeconfig(), "--cluster-cidrs", strings.Join(clusterCIDRs[u.state.Family], ","),
	}}); err != nil {
		return err
	}
	for _, n := range u.state.Nodes {
		if err := copyFile(filepath.Join(dir, kovsCNI), filepath.Join(l.CNIBinDir(n.Name), kovsCNI)); err != nil {
			return fmt.Errorf("install %s on %s: %w", kovsCNI, n.Name, err)
		}
		if _, err := l.start(Process{Name: n.Name + "-" + kovsAgent, Path: filepath.Join(dir, kovsAgent),
			NetNS: l.NodeNetNS(n.Name), Args: u.agentArgs(n)}); err != nil {
			return err
		}
	}
	return nil
}

// agentArgs is the contract between the sandbox and kovs-agent: where the node's OVS,
// kube-apiserver and CNI directories are.
func (u *upRun) agentArgs(n Node) []string {
	l := u.layout
	return []string{
		"--node-name", n.Name,
		"--kubeconfig", l.NodeKubeconfig(n.Name),
		"--ovsdb", "unix:" + l.OVSDBSocket(n.Name),
		"--ovs-rundir", l.OVSDir(n.Name),
		"--vswitchd-ctl", OVSVswitchdCtl(l, n.Name),
		"--datapath-type", "netdev",
		"--uplink-bridge", UplinkBridge,
		"--cluster-cidrs", strings.Join(clusterCIDRs[u.state.Family], ","),
		"--cni-conf-dir", l.CNIConfDir(n.Name),
		"--cni-socket", filepath.Join(l.NodeDir(n.Name), "kovs-cni.sock"),
	}
}

func copyFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	tmp := dst + ".tmp"
	out, err := os.OpenFile(tmp, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o755)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	if err := out.Close(); err != nil {
		return err
	}
	return os.Rename(tmp, dst)
}
