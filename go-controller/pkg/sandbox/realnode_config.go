package sandbox

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// Where a real node's kubelet and containerd keep things, as seen inside the node's mount
// namespace (the standard host paths, bound to the node's directories by NodeBinds).
const (
	nodeContainerdSocket = "/run/containerd/containerd.sock"
	nodeCNIConfDir       = "/etc/cni/net.d"
	nodeCNIBinDir        = "/opt/cni/bin"
	// PauseImage is the pod sandbox image every real node's containerd runs (built here,
	// imported into every node: no registry is reachable).
	PauseImage = "registry.k8s.io/pause:3.10.2"
)

// containerdConfig is a node's containerd configuration (containerd 1.6, config version
// 2): its own root, state and socket, the node's CNI directories, the pause image built
// here, and the cgroupfs driver of a cgroup v1 machine.
func (l Layout) containerdConfig() string {
	return `version = 2
root = "/var/lib/containerd"
state = "/run/containerd"
# Plugins that cannot work here (no btrfs, zfs, devmapper or aufs) are not loaded.
disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs",
  "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper"]

[grpc]
  address = "` + nodeContainerdSocket + `"

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "` + PauseImage + `"
  # Root here lacks CAP_SYS_RESOURCE: a negative oom_score_adj (kubelet asks -998 for pod
  # sandboxes) is refused, and runc then fails every sandbox with "can't get final child's
  # PID from pipe". This clamps it to what the process may set.
  restrict_oom_score_adj = true
  # containerd 2.x defaults: pods may ping and bind low ports without capabilities.
  enable_unprivileged_ports = true
  enable_unprivileged_icmp = true
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "` + nodeCNIBinDir + `"
    conf_dir = "` + nodeCNIConfDir + `"
    max_conf_num = 1
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
`
}

// kubeletConfig is a node's KubeletConfiguration. The machine has cgroup v1 (hybrid), so
// kubelet must be told to accept it and use the cgroupfs driver, under a cgroup root of
// the node's own; it authenticates kube-apiserver's client certificate and asks the API
// whether a caller may use it (Webhook), as kubeadm sets a kubelet up.
func (l Layout) kubeletConfig(node, dns string) string {
	return fmt.Sprintf(`apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
failCgroupV1: false
cgroupDriver: cgroupfs
cgroupRoot: %s
failSwapOn: false
containerRuntimeEndpoint: unix://%s
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: %s}
authorization: {mode: Webhook}
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
# Every node shares the machine's disk and memory: evict only when they are nearly gone.
evictionHard: {memory.available: "100Mi", nodefs.available: "1%%", imagefs.available: "1%%"}
imageGCHighThresholdPercent: 99
imageGCLowThresholdPercent: 98
resolvConf: /etc/resolv.conf
serializeImagePulls: false
maxPods: 110
`, l.CgroupRoot(node), nodeContainerdSocket, filepath.Join(l.PKIDir(), caCert)) + dns
}

// kubeletArgs run kubelet for node n: its name, its underlay addresses (kubelet refuses a
// loopback node IP), its own kubeconfig and root directory, and its zone: kubelet may set
// topology.kubernetes.io/zone itself (NodeRestriction allows it, as a kubelet label), as a
// cloud's kubelet does from its provider.
func (u *upRun) kubeletArgs(n Node) []string {
	l := u.layout
	args := []string{
		"--config", filepath.Join(l.NodeDir(n.Name), "kubelet.yaml"),
		"--kubeconfig", l.KubeletKubeconfig(n.Name),
		"--hostname-override", n.Name,
		"--node-ip", strings.Join(n.IPs, ","),
		"--root-dir", "/var/lib/kubelet",
		"--v", "2",
	}
	if n.Zone != "" {
		args = append(args, "--node-labels", corev1.LabelTopologyZone+"="+n.Zone)
	}
	return args
}

// writeRealNodeConfig writes node n's containerd and kubelet configurations and kubelet's
// kubeconfig with the node's own client certificate.
func (u *upRun) writeRealNodeConfig(n Node) error {
	l := u.layout
	dir := l.NodeDir(n.Name)
	if err := os.WriteFile(filepath.Join(dir, "containerd.toml"), []byte(l.containerdConfig()), 0o644); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "kubelet.yaml"), []byte(l.kubeletConfig(n.Name, u.kubeletDNS())), 0o644); err != nil {
		return err
	}
	cert, key, err := issueNodeClientCert(l.PKIDir(), n.Name)
	if err != nil {
		return fmt.Errorf("node %s client certificate: %w", n.Name, err)
	}
	return writeKubeconfigFor(l.KubeletKubeconfig(n.Name), fmt.Sprintf("https://127.0.0.1:%d", NodeAPIServerPort), l.PKIDir(),
		"system:node:"+n.Name, cert, key)
}
