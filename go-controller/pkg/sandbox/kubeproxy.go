package sandbox

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// kubeProxy is the upstream Service proxy binary (in Options.K8sBinDir).
const kubeProxy = "kube-proxy"

// Where each node's kube-proxy serves /healthz and /metrics: on the loopback of the node's
// own namespace (a loopback port is per namespace, so every node has the same ones).
const (
	NodeKubeProxyHealthzPort = 10256
	NodeKubeProxyMetricsPort = 10249
)

// KubeProxyNFTable is the nftables table kube-proxy's nftables mode owns (one per family:
// ip and ip6).
const KubeProxyNFTable = "kube-proxy"

// KubeProxyProcess is the process name of a node's kube-proxy (its pid file and its log,
// logs/<name>.log).
func KubeProxyProcess(node string) string { return node + "-" + kubeProxy }

// kubeProxyPresent checks what --kube-proxy needs: the kube-proxy binary, and nft, with
// which Up sees kube-proxy's rules.
func kubeProxyPresent(k8sBinDir string) error {
	bin := filepath.Join(k8sBinDir, kubeProxy)
	if _, err := os.Stat(bin); err != nil {
		return fmt.Errorf("--kube-proxy: %s is missing: run `make tools` (hack/build-k8s.sh builds it)", bin)
	}
	if _, err := exec.LookPath("nft"); err != nil {
		return fmt.Errorf("--kube-proxy: nft is missing (apt-get install nftables): %w", err)
	}
	return nil
}

// kubeProxies starts kube-proxy in every node namespace, as its DaemonSet would with host
// networking, and waits until each has written its nftables table: Services are then
// served by kube-proxy, and kovs-agent runs with --service-proxy=none (agentArgs).
func (u *upRun) kubeProxies() error {
	l := u.layout
	for _, n := range u.state.Nodes {
		if err := u.serviceRoutes(n); err != nil {
			return fmt.Errorf("node %s: %w", n.Name, err)
		}
		if _, err := l.start(Process{Name: KubeProxyProcess(n.Name), Path: filepath.Join(u.opts.K8sBinDir, kubeProxy),
			NetNS: l.NodeNetNS(n.Name), Args: u.kubeProxyArgs(n)}); err != nil {
			return err
		}
	}
	for _, n := range u.state.Nodes {
		if err := u.waitKubeProxy(n); err != nil {
			return err
		}
	}
	return nil
}

// serviceRoutes route the Service CIDRs out of br-ex in node n's namespace. A real node
// has a default route, so its own connections to a ClusterIP get as far as kube-proxy's
// DNAT (nftables output hook, after the route lookup); the sandbox's nodes have none, and
// without a route connect fails with "network unreachable". Traffic kube-proxy does not
// translate goes nowhere: only the nodes are on the underlay.
func (u *upRun) serviceRoutes(n Node) error {
	for _, cidr := range u.state.ServiceCIDRs {
		if err := runIn(u.layout.NodeNetNS(n.Name), "ip", "route", "replace", cidr, "dev", UplinkBridge); err != nil {
			return err
		}
	}
	return nil
}

// kubeProxyArgs run kube-proxy in nftables mode for node n. It must not masquerade pod
// traffic (--cluster-cidr: the backends and their NetworkPolicy see the client pod), and
// it leaves the conntrack sysctls alone (0 keeps a limit or timeout as it is):
// nf_conntrack_max is the machine's, read-only in a node namespace, and the timeouts stay
// those of a sandbox without kube-proxy.
func (u *upRun) kubeProxyArgs(n Node) []string {
	loopback := func(port int) string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(port)) }
	return []string{
		"--kubeconfig", u.layout.NodeKubeconfig(n.Name),
		"--hostname-override", n.Name,
		"--proxy-mode", "nftables",
		"--cluster-cidr", strings.Join(clusterCIDRs[u.state.Family], ","),
		"--detect-local-mode", "ClusterCIDR",
		"--conntrack-max-per-core", "0",
		"--conntrack-tcp-timeout-established", "0",
		"--conntrack-tcp-timeout-close-wait", "0",
		"--conntrack-udp-timeout", "0",
		"--conntrack-udp-timeout-stream", "0",
		"--healthz-bind-address", loopback(NodeKubeProxyHealthzPort),
		"--metrics-bind-address", loopback(NodeKubeProxyMetricsPort),
		// Not shielded from the OOM killer: it is one sandbox process among others.
		"--oom-score-adj", "0",
		"--v", "2",
	}
}

// waitKubeProxy waits until node n's kube-proxy has synced its rules once (its nftables
// table exists in the node namespace); if it exits first, waiting stops at once and the
// error names its log.
func (u *upRun) waitKubeProxy(n Node) error {
	return u.waitWhileRunning(KubeProxyProcess(n.Name), 60*time.Second, "kube-proxy of "+n.Name+" to write its nftables table", func() error {
		return runIn(u.layout.NodeNetNS(n.Name), "nft", "list", "table", u.kubeProxyFamily(), KubeProxyNFTable)
	})
}

// kubeProxyFamily is the nftables family of the table waitKubeProxy looks for: that of the
// sandbox's primary address family.
func (u *upRun) kubeProxyFamily() string {
	if u.state.Family == IPv6 {
		return "ip6"
	}
	return "ip"
}
