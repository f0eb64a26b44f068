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

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	log "github.com/sirupsen/logrus"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/kovs-net/kovs/go-controller/pkg/agent"
	"github.com/kovs-net/kovs/go-controller/pkg/policy/stream"
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
	flag.DurationVar(&cfg.AddressQuarantine, "address-quarantine", 30*time.Second, "a freed pod address is not handed out again before this long (nor while never-used addresses remain in the node's block)")
	flag.IntVar(&cfg.MTU, "mtu", 0, "pod MTU (0: the uplink MTU minus the tunnel overhead)")
	flag.StringVar(&cfg.CNIConfDir, "cni-conf-dir", "/etc/cni/net.d", "where the node's CNI config is written")
	flag.StringVar(&cfg.CNISocket, "cni-socket", "/var/run/kovs/cni.sock", "the CNI server's unix socket")
	flag.StringVar(&cfg.HostPortBackend, "hostport-backend", agent.HostPortBackendAuto, "the backend of the portmap plugin kovs-cni runs for hostPorts: iptables or nftables, as the node uses; auto: portmap probes for iptables on every start and stop of a pod with a hostPort")
	flag.StringVar(&cfg.CNIBinDir, "cni-bin-dir", "/opt/cni/bin", "the node's CNI plugin directory (kovs-cni is removed from it on uninstall)")
	flag.StringVar(&cfg.PodNamespace, "pod-namespace", "", "the agent's own Pod namespace (with --pod-name: clean the node up when its DaemonSet is deleted)")
	flag.StringVar(&cfg.PodName, "pod-name", "", "the agent's own Pod name (with --pod-namespace: clean the node up when its DaemonSet is deleted)")
	flag.StringVar(&cfg.ServiceProxy, "service-proxy", "kovs", "kovs: load-balance Services in br-int; none: leave them to kube-proxy (docs/services.md)")
	flag.StringVar(&cfg.ProxyHealthListen, "proxy-healthz-listen", ":10256", "where kube-proxy's health URLs /healthz and /livez are served with --service-proxy=kovs (kube-proxy's --healthz-bind-address); empty: not served")
	flag.DurationVar(&cfg.ConntrackTCPEstablished, "conntrack-tcp-timeout-established", agent.DefaultConntrackTCPEstablished, "the node's conntrack timeout of established TCP connections, set with --service-proxy=kovs as kube-proxy sets it; 0: left as it is")
	flag.DurationVar(&cfg.ConntrackTCPCloseWait, "conntrack-tcp-timeout-close-wait", agent.DefaultConntrackTCPCloseWait, "the node's conntrack timeout of TCP connections in CLOSE_WAIT, set with --service-proxy=kovs as kube-proxy sets it; 0: left as it is")
	flag.StringVar(&cfg.ProxyModeListen, "proxy-mode-listen", "127.0.0.1:10249", "where kube-proxy's /proxyMode is served with --service-proxy=kovs (kube-proxy's --metrics-bind-address); empty: not served")
	flag.DurationVar(&cfg.ProxyHealthTimeout, "proxy-healthz-timeout", agent.DefaultProxyHealthTimeout, "how long a Service or EndpointSlice change may wait to be installed before the proxy health URLs answer 503")
	flag.DurationVar(&cfg.ResyncPeriod, "resync-period", 10*time.Second, "flow resync period: the switch's count of kovs's flows is checked against the agent's (a difference, e.g. after a del-flows, is repaired by a full resync at once)")
	flag.DurationVar(&cfg.FullResyncPeriod, "full-resync-period", agent.DefaultFullResyncPeriod, "full flow resync period: a diff against the switch's dump, which also repairs flows and groups changed in place (at least --resync-period; equal to it: every resync is full)")
	flag.StringVar(&cfg.DatapathInvalidation, "datapath-invalidation", agent.DatapathInvalidationPurge, "what a policy change does to ovs-vswitchd's datapath flows: purge (drop them all), auto (narrow where the running ovs-vswitchd modifies megaflows by UFID: OVS 3.1.3 and later, kovs's build; purge elsewhere) or narrow (delete only those that may have met a policy table; unsafe with an ovs-vswitchd without that fix, docs/upgrades.md)")
	flag.DurationVar(&cfg.PolicyWait, "policy-wait", agent.DefaultPolicyWait, "how long a new pod's CNI ADD waits for its NetworkPolicy, and a starting agent for its first snapshot from kovs-controller, before going ahead with the pods closed (never open)")
	flag.IntVar(&cfg.LearnedFlowLimit, "learned-flow-limit", agent.DefaultLearnedFlowLimit, "most flows in each table the switch learns (SCTP replies and translations, Service affinity); a full table evicts the flows that expire soonest, of whoever holds the most")
	var pf policyFlags
	flag.StringVar(&pf.address, "controller-address", "", "kovs-controller's policy stream: host:port, or service:NAMESPACE/NAME to dial the ready endpoints of that Service's port \"policy-stream\" read from the API (no DNS or Service proxy needed); empty: NetworkPolicy is not enforced")
	flag.StringVar(&pf.tokenFile, "controller-token-file", "", "ServiceAccount token for the controller (audience "+stream.TokenAudience+", bound to this node or the agent's pod); read again on every reconnect")
	flag.StringVar(&pf.caConfig, "controller-ca-configmap", "kube-system/kovs-ca", "namespace/name of the ConfigMap holding the controller's CA")
	flag.StringVar(&pf.serverName, "controller-server-name", stream.DefaultServerName, "name the controller's certificate is verified for")
	flag.StringVar(&cfg.MetricsListen, "metrics-listen", "127.0.0.1:9092", "where /metrics, /healthz, /readyz and /status are served; beyond loopback, /metrics only answers other hosts (unauthenticated: an opt-in); empty: not served")
	masquerade := flag.Bool("masquerade", true, "masquerade pod traffic that leaves the cluster (to an address outside the cluster CIDRs and the nodes' addresses) to the node's address")
	noMasq := flag.String("no-masquerade-cidrs", "", "destinations never masqueraded: networks that route pod addresses back (comma-separated CIDRs)")
	flag.DurationVar(&cfg.EgressHeartbeatInterval, "egress-heartbeat-interval", time.Second, "while the node may hold egress IPs, how often its heartbeat Lease is renewed (the Lease lasts three intervals: how long a failed holder keeps its IPs)")
	flag.StringVar(&cfg.AuditLog.Path, "audit-log", "/var/log/kovs/audit.log", "the policy audit log (docs/audit.md): JSON lines of the decisions of NetworkPolicies and ClusterNetworkPolicies annotated kovs.io/audit-log; empty: off")
	flag.IntVar(&cfg.AuditLog.MaxSizeMB, "audit-log-max-size", 100, "the audit log is rotated at this size (MB)")
	flag.IntVar(&cfg.AuditLog.MaxBackups, "audit-log-max-backups", 5, "rotated audit logs kept")
	auditRate := flag.Uint("audit-rate", agent.DefaultAuditRate, "most logged decisions a second the node's audit log receives (the audit meter's rate); more are counted in kovs_agent_audit_meter_dropped_packets_total (copies the agent fell too far behind to receive, in kovs_agent_audit_connection_dropped_packets_total), not logged, and never dropped from the network")
	logLevel := flag.String("log-level", "info", "debug, info, warn or error")
	flag.Parse()
	cfg.AuditRate = uint32(*auditRate)

	level, err := log.ParseLevel(*logLevel)
	if err != nil {
		log.Fatal(err)
	}
	log.SetLevel(level)
	log.SetFormatter(&log.TextFormatter{FullTimestamp: true})
	if cfg.ClusterCIDRs, err = parseCIDRs(*cidrs); err != nil {
		log.WithError(err).Fatal("--cluster-cidrs")
	}
	cfg.NoMasquerade = !*masquerade
	if cfg.NoMasqueradeCIDRs, err = parseCIDRs(*noMasq); err != nil {
		log.WithError(err).Fatal("--no-masquerade-cidrs")
	}
	restCfg, err := clientcmd.BuildConfigFromFlags("", *kubeconfig)
	if err != nil {
		log.WithError(err).Fatal("kubeconfig")
	}
	client, err := kubernetes.NewForConfig(restCfg)
	if err != nil {
		log.WithError(err).Fatal("kubernetes client")
	}
	if cfg.Dynamic, err = dynamic.NewForConfig(restCfg); err != nil {
		log.WithError(err).Fatal("kubernetes client")
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	var conns agent.FeedConnections
	feed, err := policyFeed(ctx, pf, client, cfg.NodeName, &conns)
	if err != nil {
		log.WithError(err).Fatal("policy stream")
	}
	if feed != nil { // a nil *stream.Client would make a non-nil interface
		cfg.PolicyFeed = feed
		cfg.PolicyFeedConnected = conns.Connected
	}
	cfg.Registry = prometheus.NewRegistry()
	cfg.Registry.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
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
