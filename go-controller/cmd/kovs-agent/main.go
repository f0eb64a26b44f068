// Command kovs-agent runs on every node: it owns br-int, the Geneve tunnel, the host
// gateway port and the CNI server.
package main

import (
	"context"
	"flag"
	"fmt"
	"net/netip"
	"os/signal"
	"strings"
	"syscall"
	"time"

	log "github.com/sirupsen/logrus"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/kovs-net/kovs/go-controller/pkg/agent"
)

func main() {
	var cfg agent.Config
	kubeconfig := flag.String("kubeconfig", "", "kubeconfig (empty: in-cluster)")
	flag.StringVar(&cfg.NodeName, "node-name", "", "the Kubernetes Node this agent runs on")
	flag.StringVar(&cfg.OVSDB, "ovsdb", "unix:/var/run/openvswitch/db.sock", "Open_vSwitch database endpoint")
	flag.StringVar(&cfg.OVSRundir, "ovs-rundir", "/var/run/openvswitch", "ovs-vswitchd's run directory (bridge management sockets)")
	flag.StringVar(&cfg.VswitchdCtl, "vswitchd-ctl", "", "ovs-vswitchd's unixctl socket (default: found in --ovs-rundir)")
	flag.StringVar(&cfg.DatapathType, "datapath-type", "auto", "system, netdev, or auto (netdev without the OVS kernel module)")
	flag.StringVar(&cfg.UplinkBridge, "uplink-bridge", "", "OVS bridge holding the node address (netdev: tunnel neighbours are seeded on it)")
	cidrs := flag.String("cluster-cidrs", "10.244.0.0/16,fd00:10:244::/48", "pod cluster CIDRs (as kovs-controller's)")
	flag.IntVar(&cfg.MTU, "mtu", 0, "pod MTU (0: the uplink MTU minus the tunnel overhead)")
	flag.StringVar(&cfg.CNIConfDir, "cni-conf-dir", "/etc/cni/net.d", "where the node's CNI config is written")
	flag.StringVar(&cfg.CNISocket, "cni-socket", "/var/run/kovs/cni.sock", "the CNI server's unix socket")
	flag.DurationVar(&cfg.ResyncPeriod, "resync-period", 10*time.Second, "full flow resync period (repairs drift)")
	logLevel := flag.String("log-level", "info", "debug, info, warn or error")
	flag.Parse()

	level, err := log.ParseLevel(*logLevel)
	if err != nil {
		log.Fatal(err)
	}
	log.SetLevel(level)
	log.SetFormatter(&log.TextFormatter{FullTimestamp: true})
	if cfg.ClusterCIDRs, err = parseCIDRs(*cidrs); err != nil {
		log.WithError(err).Fatal("--cluster-cidrs")
	}
	restCfg, err := clientcmd.BuildConfigFromFlags("", *kubeconfig)
	if err != nil {
		log.WithError(err).Fatal("kubeconfig")
	}
	client, err := kubernetes.NewForConfig(restCfg)
	if err != nil {
		log.WithError(err).Fatal("kubernetes client")
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if err := agent.Run(ctx, cfg, client); err != nil {
		log.WithError(err).Fatal("kovs-agent")
	}
}

func parseCIDRs(list string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, s := range strings.Split(list, ",") {
		if s = strings.TrimSpace(s); s == "" {
			continue
		}
		p, err := netip.ParsePrefix(s)
		if err != nil {
			return nil, fmt.Errorf("%q: %w", s, err)
		}
		out = append(out, p.Masked())
	}
	return out, nil
}
