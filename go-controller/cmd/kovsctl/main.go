// Command kovsctl is the operator's tool for kovs: trace a packet, show flows and pods.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	policyapi "sigs.k8s.io/network-policy-api/pkg/client/clientset/versioned"

	"github.com/kovs-net/kovs/go-controller/pkg/kovsctl"
)

const usage = `usage: kovsctl [--kubeconfig F] [--ovs-dir DIR] COMMAND

commands:
  trace SRC DST [--port P] [--proto tcp|udp|sctp|icmp] [--ct-state trk,new] [--raw]
        SRC a pod (ns/name); DST a pod (ns/name), a node or an IP
  flows --node NODE [--table NAME] [--pod ns/name] [--policy ns/name]
  pods --node NODE
  policies [--namespace NS]       NetworkPolicies and on how many nodes each is enforced;
                                  without --namespace, ClusterNetworkPolicies and their state too
  status --node NODE[,NODE] [--agent-address ADDR] [--agent-netns NS] [-o table|json]
        agent, OVS, tunnel peers, controller connection, policy; exit 1 if anything is wrong
  plan [--cluster-cidr C[,C]] [--block-size B[,B]] [--service-cidr S[,S]] [--node-cidr N[,N]] [--max-pods N]
        node cap, pods per node, pod capacity per family and every overlap; without
        --cluster-cidr the live cluster's plan (and nodes whose max pods exceed their
        block); exit 1 on an overlap
  audit [--file F] [--follow] [--pod ns/name] [--policy NAME|ns/name|ns/] [--json]
        the node's policy audit log (docs/audit.md; default file ` + kovsctl.DefaultAuditLog + `)
  uninstall [--namespace kube-system] [--daemonset kovs-agent] [--withdraw]
        ask for kovs to be removed from the nodes when its DaemonSet is deleted next
        (then: kubectl delete -k dist/); without it, deleting the DaemonSet removes nothing

--ovs-dir is a node's OVS run directory; "{node}" in it stands for the node name
(in a sandbox: /run/kovs-sandbox/<name>/nodes/{node}/ovs). Default ` + kovsctl.DefaultOVSDir + `.
`

func main() {
	global := flag.NewFlagSet("kovsctl", flag.ExitOnError)
	global.Usage = func() { fmt.Fprint(os.Stderr, usage) }
	kubeconfig := global.String("kubeconfig", "", "kubeconfig (default: $KUBECONFIG, ~/.kube/config, in-cluster)")
	ovsDir := global.String("ovs-dir", kovsctl.DefaultOVSDir, "OVS run directory of a node ({node} = node name)")
	_ = global.Parse(os.Args[1:])
	if global.NArg() == 0 {
		global.Usage()
		os.Exit(2)
	}
	if args := global.Args(); args[0] == "audit" {
		ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
		defer stop()
		if err := auditLog(ctx, args[1:]); err != nil {
			fatal(err)
		}
		return
	}
	if args := global.Args(); args[0] == "plan" {
		if err := plan(*kubeconfig, args[1:]); err != nil {
			fatal(err)
		}
		return
	}
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = *kubeconfig
	cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{}).ClientConfig()
	if err != nil {
		fatal(err)
	}
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		fatal(err)
	}
	policyAPI, err := policyapi.NewForConfig(cfg)
	if err != nil {
		fatal(err)
	}
	access := kovsctl.Access{Client: client, PolicyAPI: policyAPI, OVSDir: kovsctl.DirTemplate(*ovsDir)}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	args := global.Args()
	switch args[0] {
	case "trace":
		err = trace(ctx, access, args[1:])
	case "flows":
		err = flows(ctx, access, args[1:])
	case "pods":
		err = pods(ctx, access, args[1:])
	case "status":
		err = status(ctx, access, args[1:])
	case "policies":
		fs := flag.NewFlagSet("policies", flag.ExitOnError)
		ns := fs.String("namespace", "", "namespace (default: all)")
		_ = fs.Parse(args[1:])
		err = access.Policies(ctx, *ns, os.Stdout)
		if err == nil && *ns == "" {
			err = access.ClusterPolicies(ctx, os.Stdout)
		}
	case "uninstall":
		fs := flag.NewFlagSet("uninstall", flag.ExitOnError)
		ns := fs.String("namespace", "kube-system", "the agent DaemonSet's namespace")
		ds := fs.String("daemonset", "kovs-agent", "the agent DaemonSet")
		withdraw := fs.Bool("withdraw", false, "take the request back")
		_ = fs.Parse(args[1:])
		err = access.Uninstall(ctx, *ns, *ds, *withdraw, os.Stdout)
	default:
		fmt.Fprintf(os.Stderr, "unknown command %q\n\n%s", args[0], usage)
		os.Exit(2)
	}
	if err != nil {
		fatal(err)
	}
}

func trace(ctx context.Context, a kovsctl.Access, args []string) error {
	fs := flag.NewFlagSet("trace", flag.ExitOnError)
	var req kovsctl.TraceRequest
	fs.IntVar(&req.Port, "port", 80, "destination port")
	fs.StringVar(&req.Proto, "proto", "tcp", "tcp, udp, sctp or icmp")
	fs.StringVar(&req.CtState, "ct-state", kovsctl.DefaultCtState, "conntrack state after ct() (ofproto/trace --ct-next): trk,new or trk,est")
	fs.BoolVar(&req.Raw, "raw", false, "also print the untouched ofproto/trace output")
	positional, err := parseInterspersed(fs, args)
	if err != nil {
		return err
	}
	if len(positional) != 2 {
		return fmt.Errorf("usage: kovsctl trace SRC DST [--port P] [--proto tcp|udp|sctp|icmp] [--ct-state trk,new] [--raw]")
	}
	req.Src, req.Dst = positional[0], positional[1]
	res, err := a.Trace(ctx, req)
	if err != nil {
		return err
	}
	res.Print(os.Stdout)
	return nil
}

func flows(ctx context.Context, a kovsctl.Access, args []string) error {
	fs := flag.NewFlagSet("flows", flag.ExitOnError)
	var req kovsctl.FlowsRequest
	fs.StringVar(&req.Node, "node", "", "node")
	fs.StringVar(&req.Table, "table", "", "only this table (name or number)")
	fs.StringVar(&req.Pod, "pod", "", "only the flows that concern this pod (ns/name)")
	fs.StringVar(&req.Policy, "policy", "", "only this NetworkPolicy's flows (ns/name)")
	_ = fs.Parse(args)
	if req.Node == "" {
		return fmt.Errorf("flows: --node is required")
	}
	return a.Flows(ctx, req, os.Stdout)
}

func pods(ctx context.Context, a kovsctl.Access, args []string) error {
	fs := flag.NewFlagSet("pods", flag.ExitOnError)
	node := fs.String("node", "", "node")
	_ = fs.Parse(args)
	if *node == "" {
		return fmt.Errorf("pods: --node is required")
	}
	return a.Pods(ctx, *node, os.Stdout)
}

// parseInterspersed parses flags that may come after positional arguments.
func parseInterspersed(fs *flag.FlagSet, args []string) ([]string, error) {
	var positional []string
	for len(args) > 0 {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		args = fs.Args()
		if len(args) > 0 {
			positional = append(positional, args[0])
			args = args[1:]
		}
	}
	return positional, nil
}

func fatal(err error) {
	fmt.Fprintln(os.Stderr, "kovsctl:", err)
	os.Exit(1)
}

// auditLog reads the node's audit log: it needs neither the API nor OVS.
func auditLog(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("audit", flag.ExitOnError)
	var req kovsctl.AuditRequest
	fs.StringVar(&req.Path, "file", kovsctl.DefaultAuditLog, "the audit log")
	fs.BoolVar(&req.Follow, "follow", false, "keep printing what is appended (across rotations)")
	fs.StringVar(&req.Pod, "pod", "", "only connections from or to this pod (ns/name)")
	fs.StringVar(&req.Policy, "policy", "", "only this policy: a ClusterNetworkPolicy's name, a NetworkPolicy's ns/name, or ns/ for a namespace's")
	fs.BoolVar(&req.JSON, "json", false, "print the log's JSON lines")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("usage: kovsctl audit [--file F] [--follow] [--pod ns/name] [--policy NAME|ns/name|ns/] [--json]")
	}
	return kovsctl.Audit(ctx, req, os.Stdout)
}
