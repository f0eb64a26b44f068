package agent

import (
	"context"
	"fmt"
	"hash/fnv"
	"net/netip"
	"os"
	"sync"
	"time"

	log "github.com/sirupsen/logrus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"

	"github.com/kovs-net/kovs/go-controller/pkg/cni"
	"github.com/kovs-net/kovs/go-controller/pkg/controller/ipam"
	"github.com/kovs-net/kovs/go-controller/pkg/ovs"
	"github.com/kovs-net/kovs/go-controller/pkg/pipeline"
	"github.com/kovs-net/kovs/go-controller/pkg/runner"
)

// Fixed OpenFlow port numbers of br-int.
const (
	tunnelOFPort  = 1
	gatewayOFPort = 2
)

// Agent is kovs-agent on one node.
type Agent struct {
	cfg    Config
	client kubernetes.Interface
	store  ovs.Store
	of     *ovs.OpenFlow

	nodes    corelisters.NodeLister
	pods     corelisters.PodLister
	state    *NodeState
	syncer   *FlowSyncer
	policy   *NodePolicy // nil: NetworkPolicy disabled
	netdev   bool
	underlay netip.Addr
	mtu      int
	ready    readiness
	metrics  *Metrics
	health   agentHealth
	// events records the agent's Events (full address blocks).
	events record.EventRecorder
	// neighbors seeds the tunnel neighbours: when peers change, and every period.
	neighbors *runner.BoundedFrequencyRunner
	// rejectedPeers are the peers last reported unusable (peersMu: updatePeers runs in
	// informer handlers).
	peersMu       sync.Mutex
	rejectedPeers map[string]string
	uninstall     uninstallWatch
	// tables writes the node's nftables tables (Service host rules, masquerade).
	tables *hostTables
	// masquerade asks for the masquerade table to be rewritten (nil until it runs).
	masquerade func()
	// tunnelGuard asks for the kovs-tunnel table to be rewritten (nil until it runs, and
	// on the kernel datapath).
	tunnelGuard func()
	// egress follows the Egresses (nil without a dynamic client).
	egress *egressAgent
	// vswitchdVersion is what --datapath-invalidation=auto read of ovs-vswitchd
	// (vswitchdSafeForNarrow), until it restarts.
	vswitchdVersion struct {
		sync.Mutex
		known, narrow bool
	}
}

// Run runs the agent until ctx ends.
func Run(ctx context.Context, cfg Config, client kubernetes.Interface) error {
	cfg.Defaults()
	if err := cfg.Validate(); err != nil {
		return err
	}
	a := &Agent{cfg: cfg, client: client, tables: newHostTables()}
	broadcaster := record.NewBroadcaster(record.WithContext(ctx))
	broadcaster.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: client.CoreV1().Events("")})
	defer broadcaster.Shutdown()
	a.events = broadcaster.NewRecorder(scheme.Scheme, corev1.EventSource{Component: "kovs-agent", Host: cfg.NodeName})
	a.neighbors = runner.MustNewBoundedFrequencyRunner("tunnel neighbours", func() { a.seedTunnelNeighbors(ctx) },
		runner.Bounds{MaxInterval: neighborPeriod, Burst: 1})
	a.ready.set(fmt.Errorf("starting"))
	if err := a.startOps(ctx); err != nil {
		return err
	}
	factory := informers.NewSharedInformerFactory(client, 0)
	podFactory := informers.NewSharedInformerFactoryWithOptions(client, 0, informers.WithTweakListOptions(
		func(o *metav1.ListOptions) {
			o.FieldSelector = fields.OneTermEqualSelector("spec.nodeName", cfg.NodeName).String()
		}))
	nodeInformer := factory.Core().V1().Nodes()
	podInformer := podFactory.Core().V1().Pods()
	a.nodes, a.pods = nodeInformer.Lister(), podInformer.Lister()
	factory.Start(ctx.Done())
	podFactory.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), nodeInformer.Informer().HasSynced, podInformer.Informer().HasSynced) {
		return fmt.Errorf("informers did not sync")
	}
	a.watchUninstall(ctx)
	self, err := a.waitForSubnets(ctx)
	if err != nil {
		return err
	}
	if err := a.connectOVS(ctx); err != nil {
		return err
	}
	defer a.store.Close()
	defer a.of.Close()
	round, err := nextRound(ctx, a.of)
	if err != nil {
		return err
	}
	a.state = NewNodeState(round, func() { a.syncer.Trigger() })
	a.syncer = NewFlowSyncer(OpenFlowSwitch(a.of), a.state.Desired, cfg.ResyncPeriod)
	if err := a.syncer.CheapResync(cfg.FullResyncPeriod, a.state.Generation); err != nil {
		return err
	}
	a.syncer.OnApplied(a.invalidateAfterPolicyChange)
	a.syncer.OnSynced(a.evictTranslations)
	a.syncer.OnSynced(a.cleanStaleConntrack)
	a.syncer.OnSynced(a.endFlowRestoreWait)
	a.syncer.metrics = a.metrics
	if cfg.PolicyFeed != nil {
		// Pods stay closed until their policy arrives, restored ones included.
		a.state.EnablePolicy(cfg.NodeName)
		a.policy = NewNodePolicy(cfg.NodeName, a.state, a.syncer.installedGeneration)
		a.policy.onController = a.controllerVerdict
		a.syncer.OnSynced(a.policy.flowsInstalled)
	}
	a.health.attach(a.state, a.syncer, a.policy)
	if err := a.startAudit(ctx); err != nil {
		return err
	}
	if err := a.setupNode(ctx, self); err != nil {
		return err
	}
	if err := a.startServiceProxy(ctx, nodeInformer.Informer()); err != nil {
		return err
	}
	a.masquerade = a.startMasquerade(ctx, podFamilies(self))
	a.tunnelGuard = a.startTunnelGuard(ctx)
	a.startEgress(ctx, podInformer.Informer())
	return a.serve(ctx, nodeInformer.Informer(), podInformer.Informer())
}

// serve runs the steady state: flows, peers, the CNI server, readiness.
func (a *Agent) serve(ctx context.Context, nodeInformer, podInformer cache.SharedIndexInformer) error {
	handlers := &PodPorts{bridge: a.cfg.Bridge, store: a.store, state: a.state, syncer: a.syncer, pods: a.pods,
		mtu: a.mtu, netdev: a.netdev, policyWait: a.cfg.PolicyWait, readiness: a.ready.get, admission: a.controllerError,
		meters: a.of, events: a.events, node: a.cfg.NodeName}
	restored, stale, err := handlers.restore(ctx)
	if err != nil {
		return fmt.Errorf("restore pod ports: %w", err)
	}
	self, err := a.nodes.Get(a.cfg.NodeName)
	if err != nil {
		return fmt.Errorf("read node %s: %w", a.cfg.NodeName, err)
	}
	if handlers.book, err = a.openAddressBook(ctx, self, stale); err != nil {
		return err
	}
	a.metrics.addressBookOpened(handlers.book)
	a.updatePeers()
	if _, err := nodeInformer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(interface{}) { a.updatePeers() },
		UpdateFunc: func(_, _ interface{}) { a.updatePeers() },
		DeleteFunc: func(interface{}) { a.updatePeers() },
	}); err != nil {
		return err
	}
	if a.policy != nil {
		go runPolicyFeed(ctx, a.cfg.PolicyFeed, a.metrics.policySink(a.policy, a.syncer), a.cfg.NodeName)
		a.awaitFirstPolicy(ctx)
	}
	go a.syncer.Run(ctx)
	if err := a.syncer.WaitFor(ctx, a.state.generationNow()); err != nil {
		return fmt.Errorf("first flow sync: %w", err)
	}
	a.health.programmed.Store(true)
	log.WithField("node", a.cfg.NodeName).WithField("pods", restored).WithField("stale", len(stale)).
		WithField("round", a.state.round).Info("br-int programmed")
	if err := handlers.removeStalePorts(ctx, stale); err != nil {
		log.WithError(err).Warn("stale pod ports left on br-int (CNI GC removes them later)")
	}
	if err := handlers.watchBandwidth(ctx, podInformer); err != nil {
		return err
	}
	a.seedTunnelNeighbors(ctx)
	server, err := cni.NewServer(a.cfg.CNISocket, a.metrics.cniHandler(handlers), log.WithField("component", "cni-server"))
	if err != nil {
		return err
	}
	a.health.cniServing.Store(true)
	go func() {
		if err := server.Serve(ctx); err != nil {
			log.WithError(err).Error("CNI server stopped")
		}
	}()
	a.ready.set(nil)
	if err := writeCNIConf(a.cfg.CNIConfDir, a.cfg.CNISocket, a.cfg.HostPortBackend); err != nil {
		return fmt.Errorf("write CNI config: %w", err)
	}
	if err := a.markNetworkAvailable(ctx); err != nil {
		log.WithError(err).Warn("could not set NetworkUnavailable=False")
	}
	go a.neighbors.Loop(ctx)
	go a.watchVswitchd(ctx, handlers)
	<-ctx.Done()
	a.health.cniServing.Store(false)
	a.ready.set(fmt.Errorf("shutting down"))
	// The CNI config stays: a stop is a restart or a rollout, and without the config the
	// runtime reports the network not ready and the node goes NotReady until the next
	// agent writes it again. Meanwhile CNI ADD finds no agent on the socket and fails, and
	// the runtime retries it. Only an uninstall removes the config.
	a.cleanNodeIfUninstalled()
	return nil
}

// awaitFirstPolicy holds the first flow sync until the controller's first snapshot has
// arrived (bounded by PolicyWait). Until that sync the switch keeps the previous agent's
// flows, its policy flows included, so an agent restart never closes running pods to new
// connections. If no snapshot comes in time, the sync goes ahead with every pod pending
// (closed): fail closed, never open. While the controller answers but is older than this
// agent (the agents were upgraded first), the wait has no bound: the node keeps the
// previous agent's flows and the CNI server does not start (no new pod, no address of
// this agent's beside the old controller's) until the controller is upgraded and its
// snapshot arrives.
func (a *Agent) awaitFirstPolicy(ctx context.Context) {
	timeout := time.After(a.cfg.PolicyWait)
	for {
		select {
		case <-a.policy.Received():
			return
		case <-ctx.Done():
			return
		case <-timeout:
			if err := a.policy.ControllerError(); err != nil {
				log.WithField("node", a.cfg.NodeName).WithError(err).
					Error("holding br-int's flows as the previous agent left them and accepting no pod until kovs-controller is upgraded")
				timeout = time.After(a.cfg.PolicyWait)
				continue
			}
			log.WithField("node", a.cfg.NodeName).WithField("waited", a.cfg.PolicyWait).
				Warn("no NetworkPolicy snapshot from kovs-controller yet: local pods stay closed until it arrives")
			return
		}
	}
}

// waitForSubnets waits until kovs-controller recorded this node's subnets.
func (a *Agent) waitForSubnets(ctx context.Context) (*corev1.Node, error) {
	logged := time.Time{}
	for {
		node, err := a.nodes.Get(a.cfg.NodeName)
		if err == nil {
			if _, err = nodeSubnets(node); err == nil {
				return node, nil
			}
		}
		if time.Since(logged) > 10*time.Second {
			log.WithField("node", a.cfg.NodeName).WithError(err).Info("waiting for the node's subnets from kovs-controller")
			logged = time.Now()
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func (a *Agent) connectOVS(ctx context.Context) error {
	store, err := ovs.NewOVSDB(ctx, a.cfg.OVSDB, ovs.WithLogger(log.WithField("component", "ovsdb")))
	if err != nil {
		return fmt.Errorf("connect to OVSDB %s: %w", a.cfg.OVSDB, err)
	}
	a.store = store
	a.health.setOVS(store)
	// A pod's CNI ADD waits for a bundle, so each bundle's ovs-ofctl is started ahead of
	// it, a while after the previous bundle: once that pod's ADD is through, and before
	// the next sync of a burst (which the flow syncer runs minSyncGap after the previous).
	of, err := ovs.NewOpenFlow(ovs.OpenFlowConfig{Bridge: a.cfg.Bridge, RunDir: a.cfg.OVSRundir,
		VswitchdCtl: vswitchdCtl(a.cfg.VswitchdCtl, a.cfg.OVSRundir),
		// Found again for every command: ovs-ctl's socket is named after the pid of an
		// ovs-vswitchd that a restart replaces.
		VswitchdLocate:  func() string { return vswitchdCtl(a.cfg.VswitchdCtl, a.cfg.OVSRundir) },
		PrestartBundles: true, PrestartDelay: minSyncGap / 2})
	if err != nil {
		return err
	}
	a.of = of
	a.netdev = a.datapathType() == ovs.DatapathNetdev
	err = a.store.EnsureBridge(ctx, ovs.BridgeSpec{
		Name: a.cfg.Bridge, DatapathType: a.datapathType(), FailMode: ovs.FailModeSecure,
		Protocols: []string{"OpenFlow13", "OpenFlow14", "OpenFlow15"},
		OtherConfig: map[string]string{
			// A stable datapath ID: a restarted ovs-vswitchd must not change it.
			"datapath-id":     datapathID(a.cfg.NodeName),
			"disable-in-band": "true",
		},
		ExternalIDs: map[string]string{"kovs.io/owner": "kovs-agent"},
	})
	if err != nil {
		return err
	}
	return a.store.LimitFlowTables(ctx, a.cfg.Bridge, LearnedTableLimits(a.cfg.LearnedFlowLimit))
}

// LearnedTableLimits bound the tables the switch learns flows into (pods' traffic adds
// them): limit flows each, evicting the soonest to expire of the largest group.
func LearnedTableLimits(limit int) map[int]ovs.FlowTableLimit {
	out := map[int]ovs.FlowTableLimit{}
	for _, t := range pipeline.LearnedTables() {
		out[int(t.Table.ID)] = ovs.FlowTableLimit{FlowLimit: limit, Evict: true, Groups: t.GroupBy}
	}
	return out
}

// datapathType resolves "auto": the kernel datapath when its module is loaded.
func (a *Agent) datapathType() string {
	switch a.cfg.DatapathType {
	case ovs.DatapathSystem, ovs.DatapathNetdev:
		return a.cfg.DatapathType
	}
	if _, err := os.Stat("/sys/module/openvswitch"); err == nil {
		return ovs.DatapathSystem
	}
	return ovs.DatapathNetdev
}

func datapathID(node string) string {
	h := fnv.New64a()
	_, _ = h.Write([]byte(node))
	return fmt.Sprintf("%016x", h.Sum64()&0x0000ffffffffffff|0x00000a0000000000)
}

// setupNode creates the tunnel and gateway ports, configures the gateway in the node's
// namespace and records the node's own configuration in the desired state.
func (a *Agent) setupNode(ctx context.Context, self *corev1.Node) error {
	blocks, _ := nodeSubnets(self)
	ips := nodeInternalIPs(self)
	if len(ips) == 0 {
		return fmt.Errorf("node %s reports no InternalIP: the tunnel needs an endpoint", self.Name)
	}
	a.underlay = ips[0]
	if err := a.resolveMTU(); err != nil {
		return err
	}
	if _, err := a.store.EnsurePort(ctx, a.cfg.Bridge, ovs.PortSpec{Name: a.cfg.TunnelName, Type: ovs.PortTypeGeneve,
		Options: map[string]string{"remote_ip": "flow", "key": "flow"}, OfportRequest: tunnelOFPort,
		ExternalIDs: map[string]string{extOwner: "tunnel"}}); err != nil {
		return fmt.Errorf("tunnel port: %w", err)
	}
	gw := Gateway{Name: a.cfg.GatewayName, MAC: gatewayMAC(blocks), ClusterCIDRs: a.cfg.ClusterCIDRs, MTU: a.mtu}
	var gwIPs []netip.Addr
	for _, b := range blocks {
		gwIPs = append(gwIPs, ipam.BlockGateway(b))
		gw.Addresses = append(gw.Addresses, netip.PrefixFrom(ipam.BlockGateway(b), b.Bits()))
	}
	if _, err := a.store.EnsurePort(ctx, a.cfg.Bridge, ovs.PortSpec{Name: a.cfg.GatewayName, Type: ovs.PortTypeInternal,
		OfportRequest: gatewayOFPort, MTURequest: a.mtu, MAC: gw.MAC.String(),
		ExternalIDs: map[string]string{extOwner: "gateway"}}); err != nil {
		return fmt.Errorf("gateway port: %w", err)
	}
	if err := gw.Configure(30 * time.Second); err != nil {
		return err
	}
	a.state.SetNode(pipeline.NodeConfig{Name: a.cfg.NodeName, GatewayMAC: gw.MAC, GatewayIPs: gwIPs, PodSubnets: blocks,
		ClusterCIDRs: a.cfg.ClusterCIDRs, TunnelOFPort: tunnelOFPort, GatewayOFPort: gatewayOFPort, UnderlayIPs: ips})
	log.WithField("node", a.cfg.NodeName).WithField("subnets", blocks).WithField("mtu", a.mtu).
		WithField("datapath", a.datapathType()).WithField("tunnel-endpoint", a.underlay).Info("node set up")
	return nil
}

// resolveMTU is the configured pod MTU, or the uplink's minus the tunnel overhead.
func (a *Agent) resolveMTU() error {
	if a.cfg.MTU > 0 {
		a.mtu = a.cfg.MTU
		return nil
	}
	uplinkMTU, uplink, err := UplinkMTU(a.underlay)
	if err != nil {
		return fmt.Errorf("detect MTU (set --mtu to skip): %w", err)
	}
	a.mtu = uplinkMTU - TunnelOverhead(a.underlay)
	log.WithField("uplink", uplink).WithField("uplink-mtu", uplinkMTU).WithField("pod-mtu", a.mtu).Info("pod MTU detected")
	return nil
}

// updatePeers recomputes the tunnel peers from all Nodes.
func (a *Agent) updatePeers() {
	nodes, err := a.nodes.List(labels.Everything())
	if err != nil {
		return
	}
	var peers []pipeline.TunnelPeer
	for _, n := range nodes {
		if n.Name == a.cfg.NodeName {
			continue
		}
		if p, ok := tunnelPeer(n, a.underlay.Is6()); ok {
			peers = append(peers, p)
		}
	}
	before := a.state.generationNow()
	if a.state.SetPeers(peers) != before {
		a.neighbors.Run()
	}
	a.peersMu.Lock()
	a.rejectedPeers = reportRejectedPeers(a.rejectedPeers, a.state.RejectedPeers())
	a.peersMu.Unlock()
	if a.masquerade != nil {
		a.masquerade()
	}
	if a.tunnelGuard != nil {
		a.tunnelGuard()
	}
	if a.egress != nil {
		a.egress.kick()
	}
}

// podFamilies says which address families the node has pod blocks of (ipv6 -> true).
func podFamilies(n *corev1.Node) map[bool]bool {
	blocks, _ := nodeSubnets(n)
	families := map[bool]bool{}
	for _, b := range blocks {
		families[b.Addr().Is6()] = true
	}
	return families
}
