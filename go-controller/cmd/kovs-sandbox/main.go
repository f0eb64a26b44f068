// Command kovs-sandbox runs a real Kubernetes cluster on one machine for kovs: real etcd,
// kube-apiserver, kube-controller-manager and kube-scheduler, one network namespace per
// node with its own Open vSwitch, and a node emulator in place of kubelet.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	log "github.com/sirupsen/logrus"

	"github.com/kovs-net/kovs/go-controller/pkg/sandbox"
	"github.com/kovs-net/kovs/go-controller/pkg/sandbox/responder"
)

const usage = `usage: kovs-sandbox [--name NAME] [--root DIR] COMMAND [ARGS]

commands:
  up [--nodes N] [--ip-family ipv4|ipv6|dual] [--network auto|kovs|none] [--kube-proxy]
     [--runtime emulator|containerd] [--images DIR] [--dist DIR] [--agent-resync-period D]
     [--no-masquerade-cidrs CIDRS] [--node-pod-cidrs]
  up --control-plane-only --nodes 0 [--cluster-cidrs CIDRS] [--audit-kovs]
                                    scale mode: control plane and kovs-controller only
                                    (make scale simulates the nodes and agents)
  upgrade [--images DIR] [--dist DIR] [--no-masquerade-cidrs CIDRS]
                                    real nodes: move kovs to this binary's release
                                    (docs/upgrades.md's order: images, controller, agents)
  down                              remove everything the sandbox made
  status                            processes and nodes
  kubeconfig                        print the admin kubeconfig path
  exec NS/POD -- CMD...             run CMD in the pod's network namespace
  probe [--timeout D] NS/POD HOST:PORT/PROTO
                                    connect from inside the pod (tcp, udp, sctp)
  restart PROCESS                   stop and start a process (e.g. node1-kovs-agent)
  matrix [--port 80/tcp] [--timeout D] [NAMESPACE...]
                                    probe every ordered pair of running pods
  external [--reset]                the external host's addresses and the sources it saw

NAME defaults to $KOVS_SANDBOX_NAME or "kovs"; state lives in ROOT/NAME (` + sandbox.DefaultRoot + `).
`

func main() {
	global := flag.NewFlagSet("kovs-sandbox", flag.ExitOnError)
	global.Usage = func() { fmt.Fprint(os.Stderr, usage) }
	name := global.String("name", envOr("KOVS_SANDBOX_NAME", "kovs"), "sandbox name")
	root := global.String("root", envOr("KOVS_SANDBOX_ROOT", sandbox.DefaultRoot), "state root directory")
	_ = global.Parse(os.Args[1:])
	args := global.Args()
	if len(args) == 0 {
		global.Usage()
		os.Exit(2)
	}
	layout, err := sandbox.NewLayout(*name, *root)
	if err != nil {
		fatal(err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	cmds := map[string]func(context.Context, sandbox.Layout, []string) error{
		"up": cmdUp, "upgrade": cmdUpgrade, "down": cmdDown, "status": cmdStatus, "kubeconfig": cmdKubeconfig,
		"exec": cmdExec, "probe": cmdProbe, "matrix": cmdMatrix, "restart": cmdRestart, "node-emulator": cmdNodeEmulator,
		"node-host": cmdNodeHost, "relays": cmdRelays, "external-host": cmdExternalHost, "external": cmdExternal,
	}
	cmd, ok := cmds[args[0]]
	if !ok {
		fmt.Fprintf(os.Stderr, "unknown command %q\n\n%s", args[0], usage)
		os.Exit(2)
	}
	if err := cmd(ctx, layout, args[1:]); err != nil {
		fatal(err)
	}
}

func cmdUp(ctx context.Context, l sandbox.Layout, args []string) error {
	fs := flag.NewFlagSet("up", flag.ExitOnError)
	nodes := fs.Int("nodes", 3, "number of nodes")
	family := fs.String("ip-family", "ipv4", "ipv4, ipv6 or dual")
	network := fs.String("network", "auto", "auto (kovs if its binaries are next to kovs-sandbox), kovs or none")
	k8sBin := fs.String("k8s-bin-dir", defaultK8sBinDir(), "kube-apiserver, kube-controller-manager, kube-scheduler (and kube-proxy)")
	etcd := fs.String("etcd", "/usr/bin/etcd", "etcd binary")
	kubeProxy := fs.Bool("kube-proxy", false, "run kube-proxy (nftables mode) in every node and kovs-agent with --service-proxy=none")
	runtime := fs.String("runtime", "emulator", "what runs pods: emulator (the node emulator) or containerd (real kubelet, containerd and runc; kovs installed from --dist with kubectl apply -k)")
	self, err := os.Executable()
	if err != nil {
		return err
	}
	images := fs.String("images", filepath.Join(filepath.Dir(self), "..", "images"), "--runtime containerd: the image archives (make images) imported into every node")
	dist := fs.String("dist", filepath.Join(filepath.Dir(self), "..", "..", "dist"), "dist/ of the repository: --runtime containerd installs kovs from its kustomization; emulated nodes run kovs under its RBAC and admission policies")
	resync := fs.Duration("agent-resync-period", 0, "every kovs-agent's --resync-period and --full-resync-period, so every resync is a full one (0: the agent's defaults, 10s and 5m)")
	nodePodCIDRs := fs.Bool("node-pod-cidrs", false, "kube-controller-manager allocates the nodes' spec.podCIDRs (--allocate-node-cidrs) and kovs-controller takes them (--use-node-pod-cidrs)")
	noMasq := fs.String("no-masquerade-cidrs", "", "every kovs-agent's --no-masquerade-cidrs (comma-separated; e.g. the external host's routed addresses 172.30.0.251/32)")
	var controllerFlags []string
	fs.Func("controller-flag", "a kovs-controller flag (--name=value) passed after the sandbox's own; repeat for more", func(v string) error {
		if !strings.HasPrefix(v, "--") {
			return fmt.Errorf("%q: give the flag as --name=value", v)
		}
		controllerFlags = append(controllerFlags, v)
		return nil
	})
	cpOnly := fs.Bool("control-plane-only", false, "scale mode: the control plane and kovs-controller only, no node namespaces or agents (use with --nodes 0)")
	cidrs := fs.String("cluster-cidrs", "", "with --control-plane-only: kovs-controller's pod CIDRs (comma-separated; default the family's, 256 node blocks)")
	replicas := fs.Int("controller-replicas", 1, "kovs-controller processes (1 to 3), electing a leader through the Lease as dist's replicas do")
	audit := fs.Bool("audit-kovs", false, "kube-apiserver writes an audit log of kovs-controller's requests to audit-kovs.log in the sandbox's directory")
	_ = fs.Parse(args)
	fam, err := sandbox.ParseIPFamily(*family)
	if err != nil {
		return err
	}
	rt, err := sandbox.ParseRuntime(*runtime)
	if err != nil {
		return err
	}
	opts := sandbox.Options{Nodes: *nodes, Family: fam, K8sBinDir: *k8sBin, EtcdPath: *etcd, SelfPath: self,
		KubeProxy: *kubeProxy, Runtime: rt, ImagesDir: filepath.Clean(*images), DistDir: filepath.Clean(*dist),
		AgentResyncPeriod: *resync, NodePodCIDRs: *nodePodCIDRs, ControlPlaneOnly: *cpOnly, AuditKovs: *audit, ControllerReplicas: *replicas, ControllerFlags: controllerFlags, Out: os.Stdout}
	opts.ClusterCIDRs = splitList(*cidrs)
	opts.NoMasqueradeCIDRs = splitList(*noMasq)
	switch *network {
	case "auto", "kovs":
		opts.KovsBinDir = filepath.Dir(self)
	case "none":
	default:
		return fmt.Errorf("--network %q: use auto, kovs or none", *network)
	}
	start := time.Now()
	if _, err := sandbox.Up(ctx, l, opts); err != nil {
		return err
	}
	fmt.Printf("sandbox %q up in %.1fs\nexport KUBECONFIG=%s\n", l.Name, time.Since(start).Seconds(), l.Kubeconfig())
	return nil
}

func cmdUpgrade(ctx context.Context, l sandbox.Layout, args []string) error {
	fs := flag.NewFlagSet("upgrade", flag.ExitOnError)
	self, err := os.Executable()
	if err != nil {
		return err
	}
	images := fs.String("images", filepath.Join(filepath.Dir(self), "..", "images"), "the new release's image archives (make images), imported into every node")
	dist := fs.String("dist", filepath.Join(filepath.Dir(self), "..", "..", "dist"), "the new release's dist/, applied through the sandbox's overlay")
	k8sBin := fs.String("k8s-bin-dir", defaultK8sBinDir(), "kubectl")
	noMasq := fs.String("no-masquerade-cidrs", "", "every kovs-agent's --no-masquerade-cidrs, as given to up")
	_ = fs.Parse(args)
	start := time.Now()
	if err := sandbox.Upgrade(ctx, l, sandbox.UpgradeOptions{ImagesDir: filepath.Clean(*images), DistDir: filepath.Clean(*dist),
		K8sBinDir: *k8sBin, NoMasqueradeCIDRs: splitList(*noMasq), Out: os.Stdout}); err != nil {
		return err
	}
	fmt.Printf("sandbox %q upgraded in %.1fs\n", l.Name, time.Since(start).Seconds())
	return nil
}

func cmdDown(_ context.Context, l sandbox.Layout, _ []string) error {
	return sandbox.Down(l, os.Stdout)
}

func cmdStatus(ctx context.Context, l sandbox.Layout, _ []string) error {
	return sandbox.PrintStatus(ctx, l, os.Stdout)
}

func cmdKubeconfig(_ context.Context, l sandbox.Layout, _ []string) error {
	if _, err := l.LoadState(); err != nil {
		return err
	}
	fmt.Println(l.Kubeconfig())
	return nil
}

func cmdExec(ctx context.Context, l sandbox.Layout, args []string) error {
	if len(args) < 1 {
		return fmt.Errorf("usage: kovs-sandbox exec NS/POD -- CMD...")
	}
	cmd := args[1:]
	if len(cmd) > 0 && cmd[0] == "--" {
		cmd = cmd[1:]
	}
	return l.Exec(ctx, args[0], cmd)
}

func cmdProbe(ctx context.Context, l sandbox.Layout, args []string) error {
	fs := flag.NewFlagSet("probe", flag.ExitOnError)
	timeout := fs.Duration("timeout", 3*time.Second, "how long to wait for an answer")
	_ = fs.Parse(args)
	if fs.NArg() != 2 {
		return fmt.Errorf("usage: kovs-sandbox probe [--timeout D] NS/POD HOST:PORT/PROTO")
	}
	res, err := l.Probe(ctx, fs.Arg(0), fs.Arg(1), *timeout)
	if err != nil {
		return err
	}
	switch {
	case res.Connected && res.Reply != nil:
		fmt.Printf("connected %s: responder %s saw source %s\n", fs.Arg(1), res.Reply.Identity, res.Reply.Peer.Addr())
	case res.Connected:
		fmt.Printf("connected %s\n", fs.Arg(1))
	case res.Refused:
		fmt.Printf("refused %s: %s\n", fs.Arg(1), res.Error)
		os.Exit(1)
	default:
		fmt.Printf("not connected %s: %s\n", fs.Arg(1), res.Error)
		os.Exit(1)
	}
	return nil
}

func cmdMatrix(ctx context.Context, l sandbox.Layout, args []string) error {
	fs := flag.NewFlagSet("matrix", flag.ExitOnError)
	portFlag := fs.String("port", "80/tcp", "port and protocol to probe")
	timeout := fs.Duration("timeout", 2*time.Second, "how long each probe waits")
	_ = fs.Parse(args)
	port, err := responder.ParsePort(*portFlag)
	if err != nil {
		return err
	}
	pods, err := l.MatrixPods(ctx, fs.Args()...)
	if err != nil {
		return err
	}
	fmt.Printf("connectivity on %s (cell: source address the destination saw, per destination address)\n", port)
	sandbox.ProbeMatrix(ctx, pods, port, *timeout).Print(os.Stdout)
	return nil
}

func cmdRestart(_ context.Context, l sandbox.Layout, args []string) error {
	if len(args) != 1 {
		return fmt.Errorf("usage: kovs-sandbox restart PROCESS (names: kovs-sandbox status)")
	}
	pid, err := l.Restart(args[0])
	if err != nil {
		return err
	}
	fmt.Printf("restarted %s (pid %d)\n", args[0], pid)
	return nil
}

func cmdNodeEmulator(ctx context.Context, l sandbox.Layout, args []string) error {
	fs := flag.NewFlagSet("node-emulator", flag.ExitOnError)
	node := fs.String("node", "", "node to emulate")
	_ = fs.Parse(args)
	log.SetFormatter(&log.TextFormatter{FullTimestamp: true})
	return sandbox.RunNodeEmulator(ctx, l, *node)
}

func cmdNodeHost(ctx context.Context, l sandbox.Layout, args []string) error {
	fs := flag.NewFlagSet("node-host", flag.ExitOnError)
	node := fs.String("node", "", "real node whose mount namespace to hold")
	_ = fs.Parse(args)
	return sandbox.RunNodeHost(ctx, l, *node)
}

func cmdRelays(ctx context.Context, l sandbox.Layout, _ []string) error {
	log.SetFormatter(&log.TextFormatter{FullTimestamp: true})
	return sandbox.RunRelays(ctx, l)
}

func cmdExternalHost(ctx context.Context, _ sandbox.Layout, _ []string) error {
	return sandbox.RunExternalHost(ctx)
}

// cmdExternal prints the external host's addresses and what its witness saw; --reset
// empties the witness.
func cmdExternal(_ context.Context, l sandbox.Layout, args []string) error {
	fs := flag.NewFlagSet("external", flag.ExitOnError)
	reset := fs.Bool("reset", false, "forget what the witness saw")
	_ = fs.Parse(args)
	if *reset {
		return l.ResetExternalSeen()
	}
	st, err := l.LoadState()
	if err != nil {
		return err
	}
	fmt.Printf("external host %s: %v\n", l.ExternalNetNS(), sandbox.ExternalAddrs(st.Family))
	seen, err := l.ExternalSeen()
	if err != nil {
		return err
	}
	for _, s := range seen {
		fmt.Printf("saw %s\n", s)
	}
	return nil
}

func defaultK8sBinDir() string {
	if d := os.Getenv("KOVS_K8S_BIN_DIR"); d != "" {
		return d
	}
	cache := os.Getenv("KOVS_CACHE")
	if cache == "" {
		home, _ := os.UserHomeDir()
		cache = filepath.Join(home, ".cache", "kovs")
	}
	return filepath.Join(cache, "k8s-v1.37.2", "bin")
}

func envOr(key, def string) string {
	if v := strings.TrimSpace(os.Getenv(key)); v != "" {
		return v
	}
	return def
}

func fatal(err error) {
	fmt.Fprintln(os.Stderr, "kovs-sandbox:", err)
	os.Exit(1)
}

// splitList splits a comma-separated flag value, dropping empty items.
func splitList(v string) []string {
	var out []string
	for _, c := range strings.Split(v, ",") {
		if c = strings.TrimSpace(c); c != "" {
			out = append(out, c)
		}
	}
	return out
}
