package sandbox

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	netfilter "github.com/containernetworking/plugins/pkg/utils"
	authnv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/kovs-net/kovs/go-controller/pkg/policy/stream"
)

// The kovs binaries the sandbox runs, and where each node's agent serves the CNI plugin.
const (
	kovsController = "kovs-controller"
	kovsAgent      = "kovs-agent"
	kovsCNI        = "kovs-cni"
	// portmap maps hostPorts; kovs-cni runs it for the pods that have any.
	portmap = "portmap"
)

// NodeControllerPort is where each node reaches kovs-controller's policy stream on its own
// loopback (forwarded to State.ControllerPort by the node emulator).
const NodeControllerPort = stream.DefaultPort

// NodeAgentMetricsPort is where each node's kovs-agent serves /metrics, /healthz, /readyz
// and /status, on the loopback of the node's namespace (State.AgentMetricsPort).
const NodeAgentMetricsPort = 9092

// The agents' ServiceAccount, whose node-bound tokens kovs-controller lets stream.
const (
	agentNamespace      = "kube-system"
	agentServiceAccount = "kovs-agent"
	// agentTokenLifetime outlives any sandbox; the agent reads its token file again on
	// every reconnect, so a refresher could be added without touching the agent.
	agentTokenLifetime = 365 * 24 * 3600
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
	for _, b := range []string{kovsController, kovsAgent, kovsCNI, portmap} {
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
	u.state.AgentMetricsPort = NodeAgentMetricsPort
	l := u.layout
	if err := u.installCRDs(); err != nil {
		return err
	}
	if err := u.kovsIdentities(); err != nil {
		return err
	}
	for _, r := range ControllerReplicas(*u.state) {
		args := []string{
			"--kubeconfig", l.ControllerKubeconfig(), "--cluster-cidrs", strings.Join(u.state.ClusterCIDRs, ","),
			// Every replica the same address: only the leader listens on it.
			"--policy-listen", net.JoinHostPort("127.0.0.1", strconv.Itoa(u.state.ControllerPort)),
			"--metrics-listen", net.JoinHostPort("127.0.0.1", strconv.Itoa(r.MetricsPort)),
		}
		if u.state.NodePodCIDRs {
			args = append(args, "--use-node-pod-cidrs")
		}
		if u.opts.ControlPlaneOnly {
			args = append(args, scaleLeaderElection...)
			args = append(args, scaleReceipts...)
		}
		args = append(args, u.opts.ControllerFlags...)
		if _, err := l.start(Process{Name: r.Process, Path: filepath.Join(dir, kovsController), Args: args}); err != nil {
			return err
		}
		if err := u.waitController(r); err != nil {
			return err
		}
	}
	if err := u.agentTokens(); err != nil {
		return fmt.Errorf("agent tokens: %w", err)
	}
	for _, n := range u.state.Nodes {
		for _, b := range []string{kovsCNI, portmap} {
			if err := copyFile(filepath.Join(dir, b), filepath.Join(l.CNIBinDir(n.Name), b)); err != nil {
				return fmt.Errorf("install %s on %s: %w", b, n.Name, err)
			}
		}
		if _, err := l.start(Process{Name: n.Name + "-" + kovsAgent, Path: filepath.Join(dir, kovsAgent),
			NetNS: l.NodeNetNS(n.Name), Args: u.agentArgs(n)}); err != nil {
			return err
		}
	}
	return nil
}

// ControllerReplica is one kovs-controller process of the sandbox.
type ControllerReplica struct {
	// Process names it for Layout.Kill, Start and PID.
	Process string
	// MetricsPort is where it serves /metrics, /healthz and /readyz (root namespace
	// loopback); kovs_controller_leader there says whether it leads.
	MetricsPort int
}

// ControllerReplicas lists the sandbox's kovs-controller processes: "kovs-controller"
// first, then "kovs-controller-2" and on (Options.ControllerReplicas).
func ControllerReplicas(s State) []ControllerReplica {
	out := []ControllerReplica{{Process: kovsController, MetricsPort: s.MetricsPort}}
	for i, port := range s.ReplicaMetricsPorts {
		out = append(out, ControllerReplica{Process: fmt.Sprintf("%s-%d", kovsController, i+2), MetricsPort: port})
	}
	return out
}

// waitController waits until the replica answers /healthz; if it exits first (it could
// not listen, say), waiting stops at once and the error shows its log.
func (u *upRun) waitController(r ControllerReplica) error {
	url := fmt.Sprintf("http://%s/healthz", net.JoinHostPort("127.0.0.1", strconv.Itoa(r.MetricsPort)))
	client := &http.Client{Timeout: 2 * time.Second}
	return u.waitWhileRunning(r.Process, 30*time.Second, r.Process+" to answer "+url, func() error {
		resp, err := client.Get(url)
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("%s: %s", url, resp.Status)
		}
		return nil
	})
}

// agentArgs is the contract between the sandbox and kovs-agent: where the node's OVS,
// kube-apiserver and CNI directories are, whether kube-proxy serves Services, and the
// full-resync period when one was asked for.
func (u *upRun) agentArgs(n Node) []string {
	l := u.layout
	args := []string{
		"--node-name", n.Name,
		"--kubeconfig", l.AgentKubeconfig(n.Name),
		"--ovsdb", "unix:" + l.OVSDBSocket(n.Name),
		"--ovs-rundir", l.OVSDir(n.Name),
		"--vswitchd-ctl", OVSVswitchdCtl(l, n.Name),
		"--datapath-type", "netdev",
		"--uplink-bridge", UplinkBridge,
		"--cluster-cidrs", strings.Join(u.state.ClusterCIDRs, ","),
		"--cni-conf-dir", l.CNIConfDir(n.Name),
		"--cni-socket", filepath.Join(l.NodeDir(n.Name), "kovs-cni.sock"),
		"--controller-address", net.JoinHostPort("127.0.0.1", strconv.Itoa(NodeControllerPort)),
		"--controller-token-file", l.ControllerTokenFile(n.Name),
		"--metrics-listen", net.JoinHostPort("127.0.0.1", strconv.Itoa(NodeAgentMetricsPort)),
		"--audit-log", l.AuditLog(n.Name),
	}
	if u.opts.KubeProxy {
		args = append(args, "--service-proxy", "none")
	}
	if b := hostPortBackend(); b != "" {
		args = append(args, "--hostport-backend", b)
	}
	if u.opts.AgentResyncPeriod > 0 {
		// Every resync a full one: tests wait for full resyncs to check that none brings
		// back what a change removed.
		args = append(args, "--resync-period", u.opts.AgentResyncPeriod.String(),
			"--full-resync-period", u.opts.AgentResyncPeriod.String())
	}
	if len(u.opts.NoMasqueradeCIDRs) > 0 {
		args = append(args, "--no-masquerade-cidrs", strings.Join(u.opts.NoMasqueradeCIDRs, ","))
	}
	return args
}

// agentTokens gives each node's agent a token of the agents' ServiceAccount bound to the
// node's Node object (TokenRequest, audience kovs-controller), as a DaemonSet's projected
// token bound to the agent's Pod would be: kube-apiserver then names the node in the
// token's user info, which kovs-controller checks against the share asked for. (The
// ServiceAccount is dist/'s; it is created here too for up runs without kovs.)
func (u *upRun) agentTokens() error {
	client, err := u.layout.Client()
	if err != nil {
		return err
	}
	ctx := u.ctx
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: agentNamespace, Name: agentServiceAccount}}
	if _, err := client.CoreV1().ServiceAccounts(agentNamespace).Create(ctx, sa, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create ServiceAccount %s/%s: %w", agentNamespace, agentServiceAccount, err)
	}
	for _, n := range u.state.Nodes {
		token, err := NodeBoundToken(ctx, client, agentNamespace, agentServiceAccount, n.Name)
		if err != nil {
			return err
		}
		if err := os.WriteFile(u.layout.ControllerTokenFile(n.Name), []byte(token), 0o600); err != nil {
			return err
		}
	}
	return nil
}

// NodeBoundToken requests a token of a ServiceAccount for kovs-controller, bound to a Node.
func NodeBoundToken(ctx context.Context, client kubernetes.Interface, namespace, serviceAccount, node string) (string, error) {
	n, err := client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	if err != nil {
		return "", fmt.Errorf("node %s: %w", node, err)
	}
	lifetime := int64(agentTokenLifetime)
	tr, err := client.CoreV1().ServiceAccounts(namespace).CreateToken(ctx, serviceAccount, &authnv1.TokenRequest{Spec: authnv1.TokenRequestSpec{
		Audiences:         []string{stream.TokenAudience},
		ExpirationSeconds: &lifetime,
		BoundObjectRef:    &authnv1.BoundObjectReference{Kind: "Node", APIVersion: "v1", Name: n.Name, UID: n.UID},
	}}, metav1.CreateOptions{})
	if err != nil {
		return "", fmt.Errorf("token of %s/%s bound to node %s: %w", namespace, serviceAccount, node, err)
	}
	return tr.Status.Token, nil
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

// installCRDs applies the CRDs of dist/ as `kubectl apply -k dist/` does on real nodes:
// egress.yaml (the Egress CRD and its permissions) and policy-api/standard.yaml
// (ClusterNetworkPolicy). Without a dist directory neither resource is served.
func (u *upRun) installCRDs() error {
	crds := []struct{ file, groupVersion, what string }{
		{"egress.yaml", "kovs.io/v1alpha1", "Egress"},
		{"policy-api/standard.yaml", "policy.networking.k8s.io/v1beta1", "ClusterNetworkPolicy"},
	}
	client, err := u.layout.Client()
	if err != nil {
		return err
	}
	for _, crd := range crds {
		path := filepath.Join(u.opts.DistDir, crd.file)
		if _, err := os.Stat(path); err != nil {
			fmt.Fprintf(u.opts.Out, "%s not found: no %s resource\n", path, crd.what)
			continue
		}
		cmd := exec.CommandContext(u.ctx, filepath.Join(u.opts.K8sBinDir, "kubectl"), "--kubeconfig", u.layout.Kubeconfig(), "apply", "-f", path)
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("kubectl apply %s: %w\n%s", path, err, out)
		}
		err := waitFor(u.ctx, 30*time.Second, "the "+crd.what+" resource to be served", func() error {
			_, err := client.Discovery().ServerResourcesForGroupVersion(crd.groupVersion)
			return err
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// hostPortBackend is the portmap backend this host supports, found once per process the
// way portmap itself probes on every call when the conflist names none (utils of the
// same plugins module): the emulated nodes run portmap with the host's iptables and nft,
// as an operator who knows the nodes sets --hostport-backend. "" when neither works.
var hostPortBackend = sync.OnceValue(func() string {
	switch {
	case netfilter.SupportsIPTables():
		return "iptables"
	case netfilter.SupportsNFTables():
		return "nftables"
	}
	return ""
})
