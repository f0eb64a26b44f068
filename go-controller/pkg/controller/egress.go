package controller

import (
	"context"
	"net/netip"
	"time"

	log "github.com/sirupsen/logrus"
	"k8s.io/client-go/kubernetes"

	"github.com/kovs-net/kovs/go-controller/pkg/controller/egressip"
	"github.com/kovs-net/kovs/go-controller/pkg/egress"
)

// runEgress assigns Egress IPs once the Egress resource is served (dist/egress.yaml),
// until ctx ends. Without a dynamic client it only waits.
func runEgress(ctx context.Context, cfg Config, client kubernetes.Interface) error {
	if cfg.Dynamic == nil {
		<-ctx.Done()
		return nil
	}
	logged := false
	for !egressServed(client) {
		if !logged {
			log.Info("the Egress resource (egresses.kovs.io) is not installed: Egress IPs wait for dist/egress.yaml")
			logged = true
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(10 * time.Second):
		}
	}
	var cluster []netip.Prefix
	for _, c := range cfg.Addresses.ClusterCIDRs {
		cluster = append(cluster, c.CIDR)
	}
	ns := cfg.Policy.AgentNamespace
	if ns == "" {
		ns = "kube-system"
	}
	return egressip.New(cfg.Dynamic, client, egressip.Options{ClusterCIDRs: cluster, LeaseNamespace: ns}).Run(ctx)
}

// egressServed reports whether the API serves the Egress resource.
func egressServed(client kubernetes.Interface) bool {
	list, err := client.Discovery().ServerResourcesForGroupVersion(egress.Resource.GroupVersion().String())
	if err != nil {
		return false
	}
	for _, r := range list.APIResources {
		if r.Name == egress.Resource.Resource {
			return true
		}
	}
	return false
}
