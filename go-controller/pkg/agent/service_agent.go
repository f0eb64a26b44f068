package agent

import (
	"context"
	"fmt"
	"time"

	log "github.com/sirupsen/logrus"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/cache"
)

// serviceSyncWait bounds how long the agent waits for the Service informers before its
// first flow sync (which would otherwise remove a previous incarnation's Service flows).
const serviceSyncWait = 60 * time.Second

// startServiceProxy starts load-balancing Services in br-int, unless they are left to
// kube-proxy. It returns once every Service is in the desired state. The proxy follows the
// node's zone (topology-aware routing) from nodes, the informer of Nodes.
func (a *Agent) startServiceProxy(ctx context.Context, nodes cache.SharedIndexInformer) error {
	if a.cfg.ServiceProxy == ServiceProxyNone {
		log.WithField("node", a.cfg.NodeName).Info("services are left to kube-proxy (--service-proxy=none)")
		removeServiceHost(a.cfg.GatewayName, a.tables)
		return nil
	}
	if err := writeSysctls("/proc/sys", conntrackTimeoutSysctls(a.cfg.ConntrackTCPEstablished, a.cfg.ConntrackTCPCloseWait)); err != nil {
		log.WithError(err).Warn("conntrack timeouts (kube-proxy's) not set")
	}
	factory := newServiceInformers(a.client)
	proxy, err := NewServiceProxy(a.cfg.NodeName, a.state, factory)
	if err != nil {
		return fmt.Errorf("service proxy: %w", err)
	}
	proxy.onChange = a.serviceHostHook()
	proxy.sctp = !a.netdev
	if a.cfg.ProxyHealthListen != "" {
		proxy.health = newProxyHealth(a.cfg.ProxyHealthTimeout, a.syncer.installedGeneration)
		a.syncer.OnSynced(proxy.health.synced)
		serveProxyURLs(ctx, a.cfg.ProxyHealthListen, "health URLs /healthz and /livez", proxyHealthHandler(proxy.health, a.ownNode))
	}
	proxy.checks = newHealthCheckServer(ctx, proxy.serviceRulesInSync)
	if a.cfg.ProxyModeListen != "" {
		serveProxyURLs(ctx, a.cfg.ProxyModeListen, "/proxyMode", proxyModeHandler())
	}
	proxy.SetZone(nodeZone(a.ownNode()))
	factory.Start(ctx.Done())
	if err := proxy.Start(ctx, serviceSyncWait); err != nil {
		return fmt.Errorf("service proxy: %w", err)
	}
	follow := func(o interface{}) {
		if n, ok := o.(*corev1.Node); ok && n.Name == a.cfg.NodeName {
			proxy.SetZone(nodeZone(n))
		}
	}
	if _, err := nodes.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: follow, UpdateFunc: func(_, o interface{}) { follow(o) },
	}); err != nil {
		return fmt.Errorf("service proxy: follow the node's zone: %w", err)
	}
	return nil
}

// nodeZone is the node's topology.kubernetes.io/zone label ("" for none, or no node).
func nodeZone(n *corev1.Node) string {
	if n == nil {
		return ""
	}
	return n.Labels[corev1.LabelTopologyZone]
}

// ownNode is the agent's Node from the informer (nil: not known yet).
func (a *Agent) ownNode() *corev1.Node {
	n, err := a.nodes.Get(a.cfg.NodeName)
	if err != nil {
		return nil
	}
	return n
}
