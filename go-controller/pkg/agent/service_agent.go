package agent

import (
	"context"
	"fmt"
	"time"

	log "github.com/sirupsen/logrus"
)

// serviceSyncWait bounds how long the agent waits for the Service informers before its
// first flow sync (which would otherwise remove a previous incarnation's Service flows).
const serviceSyncWait = 60 * time.Second

// startServiceProxy starts load-balancing Services in br-int, unless they are left to
// kube-proxy. It returns once every Service is in the desired state.
func (a *Agent) startServiceProxy(ctx context.Context) error {
	if a.cfg.ServiceProxy == ServiceProxyNone {
		log.WithField("node", a.cfg.NodeName).Info("services are left to kube-proxy (--service-proxy=none)")
		removeServiceHost(a.cfg.GatewayName, a.tables)
		return nil
	}
	factory := newServiceInformers(a.client)
	proxy, err := NewServiceProxy(a.cfg.NodeName, a.state, factory)
	if err != nil {
		return fmt.Errorf("service proxy: %w", err)
	}
	proxy.onChange = a.serviceHostHook()
	proxy.sctp = !a.netdev
	factory.Start(ctx.Done())
	if err := proxy.Start(ctx, serviceSyncWait); err != nil {
		return fmt.Errorf("service proxy: %w", err)
	}
	return nil
}
