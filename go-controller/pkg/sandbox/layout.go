// Package sandbox runs a real Kubernetes cluster on one machine for kovs: a real etcd,
// kube-apiserver, kube-controller-manager and kube-scheduler on loopback, and one network
// namespace per node with its own Open vSwitch, joined by an underlay namespace. A node
// emulator per node stands in for kubelet and the container runtime.
//
// Everything a sandbox makes is named after it: its state directory, its network
// namespaces (prefix "kovs-<name>-") and its processes (pid files in the state directory,
// and the environment variable KOVS_SANDBOX=<name>), so several sandboxes coexist and
// Down removes exactly what Up made, also after Up crashed midway.
package sandbox

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
)

// DefaultRoot holds one state directory per sandbox. It lives on tmpfs: a sandbox does not
// survive a reboot, and etcd on tmpfs is fast.
const DefaultRoot = "/run/kovs-sandbox"

// markerEnv is set in the environment of every process a sandbox starts; Down stops a
// process only if its pid file names it and its environment carries this marker.
const markerEnv = "KOVS_SANDBOX"

var validName = regexp.MustCompile(`^[a-z][a-z0-9]{0,11}$`)

// Layout names every path, namespace and node of one sandbox. It holds no state of its own:
// the same name and root always give the same layout, which is what lets Down clean up
// after a crashed Up.
type Layout struct {
	Name string
	Root string
}

// NewLayout validates the sandbox name (it becomes part of namespace and interface names).
func NewLayout(name, root string) (Layout, error) {
	if !validName.MatchString(name) {
		return Layout{}, fmt.Errorf("sandbox name %q: use 1-12 lower-case letters and digits, starting with a letter", name)
	}
	if root == "" {
		root = DefaultRoot
	}
	abs, err := filepath.Abs(root)
	if err != nil {
		return Layout{}, fmt.Errorf("state root %q: %w", root, err)
	}
	return Layout{Name: name, Root: abs}, nil
}

// Dir is the sandbox's state directory.
func (l Layout) Dir() string { return filepath.Join(l.Root, l.Name) }

// StateFile records what Up decided (ports, addresses, families).
func (l Layout) StateFile() string { return filepath.Join(l.Dir(), "state.json") }

// PidDir holds one pid file per process the sandbox started.
func (l Layout) PidDir() string { return filepath.Join(l.Dir(), "pids") }

// LogDir holds one log file per process.
func (l Layout) LogDir() string { return filepath.Join(l.Dir(), "logs") }

// LogFile is where the process started as name writes its output.
func (l Layout) LogFile(name string) string { return filepath.Join(l.LogDir(), name+".log") }

// PKIDir holds the generated CA, serving and client certificates and the SA key.
func (l Layout) PKIDir() string { return filepath.Join(l.Dir(), "pki") }

// Kubeconfig is the admin kubeconfig (root namespace, loopback).
func (l Layout) Kubeconfig() string { return filepath.Join(l.Dir(), "kubeconfig") }

// NodeDir is the per-node directory (OVS run dir, CNI dirs, node kubeconfig).
func (l Layout) NodeDir(node string) string { return filepath.Join(l.Dir(), "nodes", node) }

// OVSDir is the node's OVS database, sockets and logs directory (OVS_RUNDIR).
func (l Layout) OVSDir(node string) string { return filepath.Join(l.NodeDir(node), "ovs") }

// OVSDBSocket is the node's OVSDB unix socket.
func (l Layout) OVSDBSocket(node string) string { return filepath.Join(l.OVSDir(node), "db.sock") }

// AuditLog is the node's policy audit log (kovs-agent --audit-log).
func (l Layout) AuditLog(node string) string { return filepath.Join(l.NodeDir(node), "audit.log") }

// CNIConfDir is where the node's network plugin writes its conflist (kubelet's
// /etc/cni/net.d).
func (l Layout) CNIConfDir(node string) string { return filepath.Join(l.NodeDir(node), "cni", "net.d") }

// CNIBinDir is where the node's CNI plugin binaries live (/opt/cni/bin).
func (l Layout) CNIBinDir(node string) string { return filepath.Join(l.NodeDir(node), "cni", "bin") }

// CNICacheDir is libcni's result cache for the node (/var/lib/cni).
func (l Layout) CNICacheDir(node string) string {
	return filepath.Join(l.NodeDir(node), "cni", "cache")
}

// NodeKubeconfig is the kubeconfig for processes inside the node namespace: it points at
// the node's forwarder on the node's own loopback.
func (l Layout) NodeKubeconfig(node string) string {
	return filepath.Join(l.NodeDir(node), "kubeconfig")
}

// ControllerTokenFile is the node agent's token for kovs-controller's policy stream.
func (l Layout) ControllerTokenFile(node string) string {
	return filepath.Join(l.NodeDir(node), "controller-token")
}

// NodeName is the Kubernetes name of node i (1-based).
func (l Layout) NodeName(i int) string { return fmt.Sprintf("node%d", i) }

// NetNSPrefix starts the name of every network namespace of this sandbox.
func (l Layout) NetNSPrefix() string { return "kovs-" + l.Name + "-" }

// UnderlayNetNS is the namespace holding the underlay bridge between the nodes.
func (l Layout) UnderlayNetNS() string { return l.NetNSPrefix() + "ul" }

// NodeNetNS is the network namespace of a node (its "host network").
func (l Layout) NodeNetNS(node string) string { return l.NetNSPrefix() + node }

// PodNetNSPrefix starts the names of the pod namespaces of one node.
func (l Layout) PodNetNSPrefix(node string) string { return l.NetNSPrefix() + node + "-" }

// PodNetNS is the network namespace of a pod on node, from the pod's UID.
func (l Layout) PodNetNS(node, uid string) string {
	if len(uid) > 13 {
		uid = uid[:13]
	}
	return l.PodNetNSPrefix(node) + uid
}

// NetNSPath is the bind-mount path of a named network namespace.
func NetNSPath(name string) string { return filepath.Join("/run/netns", name) }

// Marker is the value of KOVS_SANDBOX in the environment of this sandbox's processes.
func (l Layout) Marker() string { return l.Name + ":" + l.Dir() }

// Exists reports whether the sandbox's state directory exists.
func (l Layout) Exists() bool {
	_, err := os.Stat(l.Dir())
	return err == nil
}

// The paths of a real node (kubelet and containerd, `up --runtime containerd`). Each is a
// directory of the node's state directory that the node's mount namespace binds over the
// host path a production node keeps it at (NodeBinds).

// nodePath is a directory of a node's state directory.
func (l Layout) nodePath(node, dir string) string { return filepath.Join(l.NodeDir(node), dir) }

// ContainerdSocket is the node's containerd API socket as seen from the root mount
// namespace (the node sees it at /run/containerd/containerd.sock).
func (l Layout) ContainerdSocket(node string) string {
	return filepath.Join(l.nodePath(node, "run-containerd"), "containerd.sock")
}

// KubeletKubeconfig is the kubeconfig of the node's kubelet: the node's own client
// certificate (system:node:<node>), through the node's forwarder.
func (l Layout) KubeletKubeconfig(node string) string {
	return filepath.Join(l.NodeDir(node), "kubelet.kubeconfig")
}

// EgressSocket is where kube-apiserver's egress proxy listens (relay.EgressProxy).
func (l Layout) EgressSocket() string { return filepath.Join(l.Dir(), "egress.sock") }

// CgroupRoot is the cgroup every container of a real node lives under (kubelet's
// cgroupRoot), in every cgroup v1 hierarchy.
func (l Layout) CgroupRoot(node string) string { return "/" + l.NetNSPrefix() + node }

// Bind is a directory of a node bound over a host path in the node's mount namespace.
type Bind struct {
	Source string
	Target string
}

// NodeBinds are the host paths a real node's kubelet, containerd, CNI plugins and the
// host-path volumes of its pods see as their own, what kind gets from one container per
// node. /var/run is a symlink to /run on Debian, so the targets are under /run.
func (l Layout) NodeBinds(node string) []Bind {
	return []Bind{
		{l.CNIConfDir(node), "/etc/cni/net.d"},
		{l.CNIBinDir(node), "/opt/cni/bin"},
		{l.CNICacheDir(node), "/var/lib/cni"},
		{l.OVSDir(node), "/run/openvswitch"},
		{l.nodePath(node, "etc-openvswitch"), "/etc/openvswitch"},
		{l.nodePath(node, "kovs-run"), "/run/kovs"},
		{l.nodePath(node, "kubelet"), "/var/lib/kubelet"},
		{l.nodePath(node, "containerd"), "/var/lib/containerd"},
		{l.nodePath(node, "run-containerd"), "/run/containerd"},
		{l.nodePath(node, "netns"), "/run/netns"},
		{l.nodePath(node, "log-pods"), "/var/log/pods"},
		{l.nodePath(node, "log-containers"), "/var/log/containers"},
		{l.nodePath(node, "log-kovs"), "/var/log/kovs"},
	}
}
