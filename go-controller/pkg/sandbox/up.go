package sandbox

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/netip"
	"os"
	"path/filepath"
	"time"

	"github.com/sirupsen/logrus"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Options configure Up.
type Options struct {
	Nodes  int
	Family IPFamily
	// K8sBinDir holds kube-apiserver, kube-controller-manager and kube-scheduler.
	K8sBinDir string
	// EtcdPath is the etcd binary (Debian's etcd-server by default).
	EtcdPath string
	// SelfPath is the kovs-sandbox binary, run again as each node's emulator.
	SelfPath string
	// KovsBinDir holds kovs-controller, kovs-agent and kovs-cni; kovs is started only when
	// all three are there. Empty: nodes get no network plugin.
	KovsBinDir string
	// KubeProxy runs the upstream kube-proxy (nftables mode, from K8sBinDir) in every node
	// namespace and kovs-agent with --service-proxy=none: Services are kube-proxy's.
	KubeProxy bool
	// Runtime runs the nodes' pods: the node emulator (default) or real kubelets and
	// containerd (RuntimeContainerd), which install kovs from DistDir with kubectl apply -k
	// using the images of ImagesDir.
	Runtime   Runtime
	ImagesDir string
	DistDir   string
	// AgentResyncPeriod, when set, is every kovs-agent's --resync-period (how often it
	// diffs its flows against the switch's dump); 0 leaves the agent's default (10 s).
	// Tests that must see a full resync after each change set it short.
	AgentResyncPeriod time.Duration
	// NoMasqueradeCIDRs are every kovs-agent's --no-masquerade-cidrs: destinations the
	// nodes do not masquerade pod traffic to (the external host's routed addresses, say).
	NoMasqueradeCIDRs []string
	// NodePodCIDRs has kube-controller-manager allocate the nodes' spec.podCIDRs
	// (--allocate-node-cidrs) and kovs-controller take them (--use-node-pod-cidrs).
	NodePodCIDRs bool
	// ControlPlaneOnly is the scale mode: the control plane and kovs-controller only, no
	// node namespaces, OVS or agents (Nodes must be 0). The Nodes, their kubelets and the
	// agents are simulated by whoever drives the sandbox (test/e2e/scale).
	ControlPlaneOnly bool
	// ClusterCIDRs replaces the pod address plan of the family (clusterCIDRs), for
	// clusters larger than its 256 node blocks.
	ClusterCIDRs []string
	// ControllerReplicas is how many kovs-controller processes run (0 or 1: one). They
	// elect a leader through the Lease as dist's two replicas do, share the policy stream's
	// address (only the leader listens on it) and each serve /metrics on a port of its
	// own (State.ControllerReplicas): a test kills the leader by its pid and watches the
	// standby take over.
	ControllerReplicas int
	// AuditKovs has kube-apiserver write an audit log (Metadata level) of the requests of
	// kovs-controller's ServiceAccount to Layout.KovsAuditLog(): what kovs costs the API.
	AuditKovs bool
	// ControllerFlags are passed to every kovs-controller after the sandbox's own (a
	// later flag wins): a scale run measures, say, --agent-token-verification=review.
	ControllerFlags []string
	Out             io.Writer
}

// upRun is one execution of Up.
type upRun struct {
	ctx    context.Context
	layout Layout
	opts   Options
	state  *State
}

// Up creates and starts the sandbox and returns when every node is registered. If
// anything fails, it removes what it made and returns the error.
func Up(ctx context.Context, l Layout, opts Options) (*State, error) {
	if err := opts.validate(); err != nil {
		return nil, err
	}
	if l.Exists() {
		return nil, fmt.Errorf("sandbox %q already exists in %s: run `kovs-sandbox down --name %s` first", l.Name, l.Dir(), l.Name)
	}
	u := &upRun{ctx: ctx, layout: l, opts: opts}
	if err := u.run(); err != nil {
		if kept := l.keepLogs(); kept != "" {
			err = fmt.Errorf("%w\n(logs of the failed sandbox kept in %s)", err, kept)
		}
		if derr := Down(l, io.Discard); derr != nil {
			err = errors.Join(err, fmt.Errorf("clean up after failed up: %w", derr))
		}
		return nil, err
	}
	return u.state, nil
}

func (o *Options) validate() error {
	if o.ControlPlaneOnly {
		if err := o.validateControlPlaneOnly(); err != nil {
			return err
		}
	} else if o.Nodes < 1 || o.Nodes > 249 {
		return fmt.Errorf("--nodes %d: use 1 to 249 (node i has the underlay address .i; the external host has .250 and .251)", o.Nodes)
	} else if len(o.ClusterCIDRs) > 0 {
		return fmt.Errorf("--cluster-cidrs is for --control-plane-only (emulated nodes use the family's plan)")
	}
	for _, f := range []string{filepath.Join(o.K8sBinDir, "kube-apiserver"), filepath.Join(o.K8sBinDir, "kube-controller-manager"),
		filepath.Join(o.K8sBinDir, "kube-scheduler"), o.EtcdPath, o.SelfPath} {
		if _, err := os.Stat(f); err != nil {
			return fmt.Errorf("%s is missing: run `make tools` (builds the Kubernetes binaries and installs etcd and OVS)", f)
		}
	}
	if o.ControllerReplicas < 0 || o.ControllerReplicas > 3 {
		return fmt.Errorf("--controller-replicas %d: use 1 to 3", o.ControllerReplicas)
	}
	if o.AgentResyncPeriod < 0 {
		return fmt.Errorf("--agent-resync-period %s: use a positive duration, or 0 for the agent's default", o.AgentResyncPeriod)
	}
	for _, c := range o.NoMasqueradeCIDRs {
		if _, err := netip.ParsePrefix(c); err != nil {
			return fmt.Errorf("--no-masquerade-cidrs %q: %w", c, err)
		}
	}
	if o.KubeProxy {
		if err := kubeProxyPresent(o.K8sBinDir); err != nil {
			return err
		}
	}
	if o.Runtime == "" {
		o.Runtime = RuntimeEmulator
	}
	if o.Runtime == RuntimeContainerd {
		if o.ControllerReplicas > 1 {
			return fmt.Errorf("--controller-replicas is for emulated nodes: with --runtime containerd, dist's Deployment runs its replicas")
		}
		if o.KubeProxy {
			return fmt.Errorf("--kube-proxy is not supported with --runtime containerd yet")
		}
		if err := o.validateRealNodes(); err != nil {
			return err
		}
	}
	if o.Out == nil {
		o.Out = io.Discard
	}
	return nil
}

func (u *upRun) run() error {
	l := u.layout
	for _, d := range []string{l.Dir(), l.PidDir(), l.LogDir()} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
	}
	state, err := u.planAndSave()
	if err != nil {
		return err
	}
	u.state = state
	for _, s := range u.steps() {
		start := time.Now()
		if err := s.do(); err != nil {
			return fmt.Errorf("%s: %w", s.what, err)
		}
		fmt.Fprintf(u.opts.Out, "%-18s %6.2fs\n", s.what, time.Since(start).Seconds())
	}
	return l.saveState(state)
}

// steps are what Up does, in order, for the sandbox's runtime.
func (u *upRun) steps() []upStep {
	if u.opts.ControlPlaneOnly {
		return []upStep{
			{"control plane", func() error { return u.controlPlane(u.ctx) }},
			{"kovs-controller", u.kovs},
		}
	}
	steps := []upStep{
		{"underlay", u.underlay},
		{"external host", u.externalHost},
		{"control plane", func() error { return u.controlPlane(u.ctx) }},
		{"nodes", u.nodes},
	}
	if u.opts.Runtime == RuntimeContainerd {
		return append(steps,
			upStep{"image import", u.importImages},
			upStep{"relays", u.startRelays},
			upStep{"kubelets", u.startKubelets},
			upStep{"node registration", u.waitNodesRegistered},
			upStep{"kovs (kubectl apply -k)", u.installKovs},
			upStep{"CoreDNS", u.installCoreDNS},
		)
	}
	steps = append(steps,
		// kovs after the Nodes exist: each agent's token is bound to its Node.
		upStep{"node registration", u.waitNodesRegistered},
		upStep{"kovs", u.kovs},
	)
	if u.opts.KubeProxy {
		steps = append(steps, upStep{"kube-proxy", u.kubeProxies})
	}
	return steps
}

// upStep is one timed step of Up.
type upStep struct {
	what string
	do   func() error
}

// planAndSave plans the sandbox and saves its state while it holds the root's port lock,
// its ports chosen apart from those of every other sandbox's state: two sandboxes coming
// up at once could otherwise pick one port, free when each looked, and the second to bind
// it fails (kube-apiserver: "address already in use", seen in make test).
func (u *upRun) planAndSave() (*State, error) {
	unlock, err := lockFile(filepath.Join(u.layout.Root, ".ports.lock"))
	if err != nil {
		return nil, err
	}
	defer unlock()
	taken, err := otherSandboxPorts(u.layout)
	if err != nil {
		return nil, err
	}
	state, err := u.plan(taken)
	if err != nil {
		return nil, err
	}
	return state, u.layout.saveState(state)
}

func (u *upRun) plan(taken map[int]bool) (*State, error) {
	s := &State{Name: u.layout.Name, Family: u.opts.Family, ServiceCIDRs: serviceCIDRs(u.opts.Family),
		Nodes: planNodes(u.layout, u.opts.Nodes, u.opts.Family), KubeProxy: u.opts.KubeProxy, Runtime: u.opts.Runtime,
		NodePodCIDRs: u.opts.NodePodCIDRs, ClusterCIDRs: u.opts.ClusterCIDRs}
	if len(s.ClusterCIDRs) == 0 {
		s.ClusterCIDRs = clusterCIDRs[u.opts.Family]
	}
	for _, p := range []*int{&s.EtcdPort, &s.EtcdPeerPort, &s.APIServerPort, &s.ControllerPort, &s.MetricsPort} {
		port, err := freePort(taken)
		if err != nil {
			return nil, err
		}
		*p = port
	}
	for i := 2; i <= u.opts.ControllerReplicas; i++ {
		port, err := freePort(taken)
		if err != nil {
			return nil, err
		}
		s.ReplicaMetricsPorts = append(s.ReplicaMetricsPorts, port)
	}
	return s, nil
}

func (u *upRun) nodes() error {
	for _, n := range u.state.Nodes {
		if err := u.node(n); err != nil {
			return err
		}
	}
	return nil
}

func (u *upRun) waitNodesRegistered() error {
	client, err := u.layout.Client()
	if err != nil {
		return err
	}
	return waitFor(u.ctx, 60*time.Second, "every node emulator to register its Node", func() error {
		for _, n := range u.state.Nodes {
			p := n.Name + "-emulator"
			if u.opts.Runtime == RuntimeContainerd {
				p = KubeletProcess(n.Name)
			}
			if !u.layout.Running(p) {
				return permanent(u.withLog(fmt.Errorf("%s exited", p), p))
			}
		}
		nodes, err := client.CoreV1().Nodes().List(u.ctx, metav1.ListOptions{})
		if err != nil {
			return err
		}
		if len(nodes.Items) != len(u.state.Nodes) {
			return fmt.Errorf("%d of %d nodes registered", len(nodes.Items), len(u.state.Nodes))
		}
		return nil
	})
}

// keepLogs moves the logs of a failed Up out of the state directory before Down removes
// it, and returns where they went.
func (l Layout) keepLogs() string {
	dst := filepath.Join(os.TempDir(), "kovs-sandbox-"+l.Name+"-failed-logs")
	_ = os.RemoveAll(dst)
	if err := os.Rename(l.LogDir(), dst); err != nil {
		return ""
	}
	// On real nodes kovs itself runs in pods, OVS (kovs-ovs) included: its logs (and
	// CoreDNS's) are the nodes' /var/log/pods, copied as <node>-pods. An emulated node's
	// OVS writes its own log files (<node>-ovs).
	nodes, _ := filepath.Glob(l.NodeDir("*"))
	for _, dir := range nodes {
		node := filepath.Base(dir)
		l.copyNodeLogs(node, "log-pods", filepath.Join(dst, node+"-pods"), func(string) bool { return true })
		l.copyNodeLogs(node, "ovs", filepath.Join(dst, node+"-ovs"), func(p string) bool { return filepath.Ext(p) == ".log" })
	}
	return dst
}

// copyNodeLogs copies the files of the node's directory dir that keep selects to dst,
// best effort (a failed sandbox's logs are evidence, not state).
func (l Layout) copyNodeLogs(node, dir, dst string, keep func(path string) bool) {
	src := l.nodePath(node, dir)
	err := filepath.WalkDir(src, func(path string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() || !keep(path) {
			return err
		}
		rel, err := filepath.Rel(src, path)
		if err != nil {
			return err
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		out := filepath.Join(dst, rel)
		if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
			return err
		}
		return os.WriteFile(out, data, 0o644)
	})
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		logrus.WithError(err).WithFields(logrus.Fields{"node": node, "dir": dir}).Warn("copying a failed node's logs")
	}
}
