package controller

import (
	"context"
	"time"

	log "github.com/sirupsen/logrus"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/record"
	"sigs.k8s.io/network-policy-api/apis/v1beta1"
	"sigs.k8s.io/network-policy-api/pkg/client/clientset/versioned"
	"sigs.k8s.io/network-policy-api/pkg/client/informers/externalversions"

	"github.com/kovs-net/kovs/go-controller/pkg/audit"
	"github.com/kovs-net/kovs/go-controller/pkg/controller/clusterpolicy"
	"github.com/kovs-net/kovs/go-controller/pkg/controller/realization"
)

// runClusterPolicies writes the status of every ClusterNetworkPolicy and feeds their
// rules to the NetworkPolicy compiler (sink), which carries them in the nodes' shares,
// once the API serves the resource (dist/policy-api/standard.yaml), until ctx ends.
// Without a client it only waits.
func runClusterPolicies(ctx context.Context, client versioned.Interface, recorder record.EventRecorder, obs observer,
	core informers.SharedInformerFactory, sink clusterpolicy.Sink, tracker *realization.Tracker, minInterval time.Duration) error {
	if client == nil {
		<-ctx.Done()
		return nil
	}
	logged := false
	for !clusterPoliciesServed(client) {
		if !logged {
			log.Info("the ClusterNetworkPolicy resource (policy.networking.k8s.io/v1beta1) is not installed: waiting for dist/policy-api/standard.yaml")
			logged = true
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(10 * time.Second):
		}
	}
	feed, err := clusterpolicy.NewFeed(client, core, sink, minInterval)
	if err != nil {
		return err
	}
	status, err := clusterpolicy.NewStatus(client, recorder, obs.reconcile(), tracker, feed.Compiled)
	if err != nil {
		return err
	}
	audited := externalversions.NewSharedInformerFactory(client, 0).Policy().V1beta1().ClusterNetworkPolicies().Informer()
	if err := watchAuditAnnotations(audited, recorder, audit.ClusterPolicyVerdicts); err != nil {
		return err
	}
	go audited.Run(ctx.Done())
	// The Programmed condition follows the agents' reports and each batch of the feed.
	tracker.OnClusterChange(status.Enqueue)
	feed.OnCompiled(status.EnqueueSettled)
	ctx, cancel := context.WithCancel(ctx)
	return runAll(ctx, cancel, map[string]func(context.Context) error{"status": status.Run, "rules": feed.Run})
}

// clusterPoliciesServed reports whether the API serves ClusterNetworkPolicy v1beta1.
func clusterPoliciesServed(client versioned.Interface) bool {
	list, err := client.Discovery().ServerResourcesForGroupVersion(v1beta1.GroupVersion.String())
	if err != nil {
		return false
	}
	for _, r := range list.APIResources {
		if r.Name == "clusternetworkpolicies" {
			return true
		}
	}
	return false
}
