// Package agent is kovs-agent: it owns the node's br-int (its OVSDB records and its
// OpenFlow pipeline), the Geneve tunnel to the other nodes, the host gateway port, and the
// unix socket server the CNI plugin talks to.
package agent

import (
	"fmt"
	"net/netip"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/dynamic"

	"github.com/kovs-net/kovs/go-controller/pkg/audit"
)

// Config configures the agent of one node.
type Config struct {
	NodeName string
	// OVSDB is the database endpoint, e.g. unix:/var/run/openvswitch/db.sock.
	OVSDB string
	// OVSRundir is ovs-vswitchd's run directory (its <bridge>.mgmt sockets and
	// ovs-vswitchd.<pid>.ctl, or the ctl path given with --unixctl).
	OVSRundir string
	// VswitchdCtl is ovs-vswitchd's unixctl socket; empty: found in OVSRundir.
	VswitchdCtl string
	// DatapathType is system, netdev, or auto (netdev when the OVS kernel datapath is
	// not available).
	DatapathType string
	// UplinkBridge is the OVS bridge holding the node's tunnel endpoint address, when the
	// datapath is netdev (its tunnel neighbours are seeded on it).
	UplinkBridge string
	Bridge       string
	GatewayName  string
	TunnelName   string
	ClusterCIDRs []netip.Prefix
	// MTU of pod interfaces; 0: the uplink's MTU minus the tunnel overhead.
	MTU        int
	CNIConfDir string
	CNISocket  string
	// HostPortBackend is the backend of the portmap plugin kovs-cni runs for hostPorts:
	// "iptables" or "nftables", written into the conflist, or "auto", which leaves portmap
	// to probe the node for iptables on every ADD and DEL of a pod with a hostPort (two
	// iptables runs per call).
	HostPortBackend string
	// DatapathInvalidation is what a policy change does to ovs-vswitchd's datapath flows
	// (--datapath-invalidation): DatapathInvalidationPurge drops them all
	// (revalidator/purge), DatapathInvalidationNarrow deletes only those that may have met
	// a policy table (invalidateDatapathFlows), DatapathInvalidationAuto chooses narrow
	// where the running ovs-vswitchd is safe for it. Empty: purge.
	DatapathInvalidation string
	// ResyncPeriod is how often the agent resyncs its flows against the switch: a count
	// of them (FlowSyncer.CheapResync), and every FullResyncPeriod a full diff against
	// the switch's dump.
	ResyncPeriod     time.Duration
	FullResyncPeriod time.Duration
	// LearnedFlowLimit bounds each table of flows the switch learns (SCTP replies and
	// translations, Service affinity; pipeline.LearnedTables): when one is full, its
	// flows that expire soonest are evicted, first from whoever holds the most.
	LearnedFlowLimit int
	// AddressQuarantine is the least time before a freed pod address is handed out again
	// (and, while never-used addresses remain in the block, it is not at all).
	AddressQuarantine time.Duration
	// PolicyFeed delivers the node's NetworkPolicy share from kovs-controller, once the
	// node is programmed. Nil disables NetworkPolicy: no policy flows, no isolation.
	PolicyFeed PolicyFeed
	// PolicyWait bounds how long a CNI ADD waits for the new pod's NetworkPolicy to
	// arrive and be installed (with a PolicyFeed), and how long a starting agent waits for
	// its first snapshot before it programs the switch with its pods closed
	// (0: DefaultPolicyWait).
	PolicyWait time.Duration
	// ServiceProxy is "kovs" (br-int load-balances Services) or "none" (kube-proxy does).
	ServiceProxy string
	// ProxyHealthListen is where kube-proxy's health URLs (/healthz, /livez) are served
	// with --service-proxy=kovs (kube-proxy's --healthz-bind-address, :10256; empty: not
	// served). ProxyHealthTimeout is how long a Service change may wait to be installed
	// before they say unhealthy (0: DefaultProxyHealthTimeout).
	ProxyHealthListen  string
	ProxyHealthTimeout time.Duration
	// ConntrackTCPEstablished and ConntrackTCPCloseWait are the node's TCP conntrack
	// timeouts the agent sets with --service-proxy=kovs, as kube-proxy does (0: left as
	// they are).
	ConntrackTCPEstablished time.Duration
	ConntrackTCPCloseWait   time.Duration
	// ProxyModeListen is where kube-proxy's /proxyMode is served with --service-proxy=kovs
	// (kube-proxy's --metrics-bind-address, 127.0.0.1:10249; empty: not served).
	ProxyModeListen string
	// PolicyFeedConnected, if set, reports whether the PolicyFeed is connected now (for
	// readiness and status).
	PolicyFeedConnected func() bool
	// MetricsListen is where /metrics, /healthz, /readyz and /status are served (empty:
	// not served); Registry is the registry the agent's metrics are registered on and
	// /metrics gathers (nil: no metrics).
	MetricsListen string
	Registry      *prometheus.Registry
	// PodNamespace and PodName name the agent's own Pod (a DaemonSet's). When set, the
	// agent watches the DaemonSet that owns it: once that is deleted (`kubectl delete -k
	// dist/`), the agent's shutdown removes what kovs put on the node (br-int with its
	// ports and flows, the CNI config, socket and binary in CNIBinDir, the Service host
	// rules). A restart, an upgrade or a rolling update leaves everything in place.
	PodNamespace string
	PodName      string
	CNIBinDir    string
	// NoMasquerade turns off the masquerading of pod traffic that leaves the cluster
	// (masquerade.go); NoMasqueradeCIDRs are destinations it never translates (networks
	// that route pod addresses back).
	NoMasquerade      bool
	NoMasqueradeCIDRs []netip.Prefix
	// AuditLog is where the policy audit log is written (docs/audit.md), with its
	// rotation; an empty Path turns the log off (no meter, no monitor, no flow logs).
	AuditLog audit.FileConfig
	// AuditRate is the audit meter's rate: packet-ins a second the node's log receives at
	// most (default DefaultAuditRate).
	AuditRate uint32
	// Dynamic reaches the Egress resource (nil: Egress is not followed).
	Dynamic dynamic.Interface
	// EgressHeartbeatInterval is how often the node's heartbeat Lease is renewed while it
	// may hold egress IPs (the Lease lasts three intervals); EgressLeaseNamespace holds it.
	EgressHeartbeatInterval time.Duration
	EgressLeaseNamespace    string
}

// Defaults fills in what was left empty.
func (c *Config) Defaults() {
	if c.Bridge == "" {
		c.Bridge = "br-int"
	}
	if c.GatewayName == "" {
		c.GatewayName = "kovs-gw0"
	}
	if c.TunnelName == "" {
		c.TunnelName = "kovs-tun0"
	}
	if c.DatapathType == "" {
		c.DatapathType = "auto"
	}
	if c.ResyncPeriod == 0 {
		c.ResyncPeriod = 10 * time.Second
	}
	if c.FullResyncPeriod == 0 {
		c.FullResyncPeriod = DefaultFullResyncPeriod
	}
	if c.ServiceProxy == "" {
		c.ServiceProxy = ServiceProxyKovs
	}
	if c.ProxyHealthTimeout == 0 {
		c.ProxyHealthTimeout = DefaultProxyHealthTimeout
	}
	if c.HostPortBackend == "" {
		c.HostPortBackend = HostPortBackendAuto
	}
	if c.DatapathInvalidation == "" {
		c.DatapathInvalidation = DatapathInvalidationPurge
	}
	if c.AuditRate == 0 {
		c.AuditRate = DefaultAuditRate
	}
	if c.PolicyWait == 0 {
		c.PolicyWait = DefaultPolicyWait
	}
	if c.LearnedFlowLimit == 0 {
		c.LearnedFlowLimit = DefaultLearnedFlowLimit
	}
	if c.EgressHeartbeatInterval == 0 {
		c.EgressHeartbeatInterval = time.Second
	}
	if c.EgressLeaseNamespace == "" {
		c.EgressLeaseNamespace = c.PodNamespace
	}
	if c.EgressLeaseNamespace == "" {
		c.EgressLeaseNamespace = "kube-system"
	}
}

// The backends of the portmap plugin kovs-cni runs (--hostport-backend). portmap's own names.
const (
	HostPortBackendAuto     = "auto"
	HostPortBackendIPTables = "iptables"
	HostPortBackendNFTables = "nftables"
)

// What a policy change does to the datapath flows (--datapath-invalidation).
const (
	// DatapathInvalidationAuto is narrow where the running ovs-vswitchd modifies a
	// megaflow by the UFID it is given (OVS 3.1.3 and later in 3.1, 3.2.1 and later,
	// kovs's own build: ovsVersionModifiesByUFID), purge anywhere else. Not the default:
	// with narrow on kovs's build, two local CI runs failed a Service test under load
	// (docs/upgrades.md).
	DatapathInvalidationAuto = "auto"
	// DatapathInvalidationNarrow deletes only the datapath flows that may have met a
	// policy table, and purges when that fails. It deletes them behind ovs-vswitchd's
	// revalidators (dpctl/del-flow), and a revalidator round already under way then
	// modifies the deleted flows by key, which OVS 3.1.0's userspace datapath can apply to
	// another, overlapping flow (fixed in 3.1.3, and by the patch kovs's ovs-vswitchd
	// carries, hack/ovs; docs/upgrades.md): forced, it is unsafe on such an ovs-vswitchd.
	DatapathInvalidationNarrow = "narrow"
	// DatapathInvalidationPurge drops every datapath flow of ovs-vswitchd
	// (revalidator/purge, which goes through the revalidators), so every established
	// connection of the node goes through upcalls again at each policy change: the
	// default.
	DatapathInvalidationPurge = "purge"
)

// DefaultPolicyWait is --policy-wait's default: how long a CNI ADD waits for the new pod's
// policy, and a starting agent for its first snapshot, before going ahead closed.
const DefaultPolicyWait = 30 * time.Second

// DefaultLearnedFlowLimit is --learned-flow-limit's default: room for 32,768 SCTP
// associations (or Service affinity clients) per learned table on one node.
const DefaultLearnedFlowLimit = 32768

// DefaultFullResyncPeriod is --full-resync-period's default. The resyncs in between (every
// --resync-period) count kovs's flows on the switch, which finds deleted flows (a
// del-flows, a restarted ovs-vswitchd) within a resync period; a full resync dumps and
// diffs every flow and group, and is what finds one changed in place (mod-flows,
// mod-group). At 1,000 pods and 1,000 policies an idle full resync costs about 6 times
// a count in CPU, 165 ms against 28 (BenchmarkAgentResync, docs/architecture.md).
const DefaultFullResyncPeriod = 5 * time.Minute

// Validate says what is wrong with the configuration.
func (c *Config) Validate() error {
	switch {
	case c.NodeName == "":
		return fmt.Errorf("--node-name is required (the Kubernetes Node this agent runs on)")
	case c.OVSDB == "":
		return fmt.Errorf("--ovsdb is required (e.g. unix:/var/run/openvswitch/db.sock)")
	case len(c.ClusterCIDRs) == 0:
		return fmt.Errorf("--cluster-cidrs is required (the same as kovs-controller's)")
	case c.CNISocket == "":
		return fmt.Errorf("--cni-socket is required")
	case c.EgressHeartbeatInterval < 100*time.Millisecond:
		return fmt.Errorf("--egress-heartbeat-interval %s: use at least 100ms (1s is the default)", c.EgressHeartbeatInterval)
	case c.ResyncPeriod < minSyncGap:
		return fmt.Errorf("--resync-period %s: use at least %s (the resync repairs drift; 10s is the default)", c.ResyncPeriod, minSyncGap)
	case c.FullResyncPeriod < c.ResyncPeriod:
		return fmt.Errorf("--full-resync-period %s: use at least --resync-period (%s); %s is the default, --resync-period's value makes every resync a full one",
			c.FullResyncPeriod, c.ResyncPeriod, DefaultFullResyncPeriod)
	case c.PolicyWait < 0:
		return fmt.Errorf("--policy-wait %s: use 0 (the default, %s) or more", c.PolicyWait, DefaultPolicyWait)
	case c.ConntrackTCPEstablished < 0 || c.ConntrackTCPCloseWait < 0:
		return fmt.Errorf("--conntrack-tcp-timeout-established %s, --conntrack-tcp-timeout-close-wait %s: use 0 (leave the node's) or more", c.ConntrackTCPEstablished, c.ConntrackTCPCloseWait)
	case c.ProxyHealthTimeout < time.Second:
		return fmt.Errorf("--proxy-healthz-timeout %s: use at least 1s (%s is the default, as kube-proxy's)", c.ProxyHealthTimeout, DefaultProxyHealthTimeout)
	case c.LearnedFlowLimit < 16:
		return fmt.Errorf("--learned-flow-limit %d: use at least 16 (flows per learned table; %d is the default)", c.LearnedFlowLimit, DefaultLearnedFlowLimit)
	}
	if c.ServiceProxy != ServiceProxyKovs && c.ServiceProxy != ServiceProxyNone {
		return fmt.Errorf("--service-proxy %q: use kovs or none", c.ServiceProxy)
	}
	for _, p := range c.NoMasqueradeCIDRs {
		if !p.IsValid() || p != p.Masked() {
			return fmt.Errorf("--no-masquerade-cidrs: %q is not a network prefix (as in 192.168.0.0/16)", p)
		}
	}
	switch c.HostPortBackend {
	case HostPortBackendAuto, HostPortBackendIPTables, HostPortBackendNFTables:
	default:
		return fmt.Errorf("--hostport-backend %q: use auto, iptables or nftables (what the node's kube-proxy or firewall uses)", c.HostPortBackend)
	}
	switch c.DatapathInvalidation {
	case DatapathInvalidationAuto, DatapathInvalidationPurge, DatapathInvalidationNarrow:
	default:
		return fmt.Errorf("--datapath-invalidation %q: use purge (the default: every datapath flow dropped after a policy change), auto (narrow where ovs-vswitchd carries the fix of OVS 3.1.3, purge elsewhere) or narrow (only the datapath flows a policy change may affect are deleted; unsafe with an ovs-vswitchd without that fix)", c.DatapathInvalidation)
	}
	switch c.DatapathType {
	case "auto", "system", "netdev":
	default:
		return fmt.Errorf("--datapath-type %q: use auto, system or netdev", c.DatapathType)
	}
	return nil
}
