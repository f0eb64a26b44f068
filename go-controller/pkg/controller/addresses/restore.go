package addresses

import (
	"fmt"

	log "github.com/sirupsen/logrus"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	corelisters "k8s.io/client-go/listers/core/v1"

	"github.com/kovs-net/kovs/go-controller/pkg/controller/ipam"
)

// Restore rebuilds the allocator from the API after a (re)start, before any reconcile:
// every Node's recorded blocks, then every live pod's recorded addresses. Conflicting or
// invalid records are logged and left to the reconcilers, which allocate afresh (a pod
// whose addresses conflict gets new ones only after it is recreated: its running sandbox
// keeps the old ones, so the conflict is reported, never silently resolved).
func (a *Allocator) Restore(nodes corelisters.NodeLister, pods corelisters.PodLister) error {
	nodeList, err := nodes.List(labels.Everything())
	if err != nil {
		return err
	}
	restoredNodes := 0
	for _, n := range nodeList {
		if a.restoreNode(n) {
			restoredNodes++
		}
	}
	podList, err := pods.List(labels.Everything())
	if err != nil {
		return err
	}
	restoredPods := 0
	for _, p := range podList {
		if a.restorePodFromAnnotation(p) {
			restoredPods++
		}
	}
	log.WithField("nodes", restoredNodes).WithField("pods", restoredPods).Info("address state rebuilt from the API")
	return nil
}

func (a *Allocator) restoreNode(n *corev1.Node) bool {
	value, ok := n.Annotations[ipam.NodeSubnetsAnnotationKey]
	if !ok {
		return false
	}
	ann, err := ipam.ParseNodeSubnetsAnnotation(value)
	if err == nil && !a.cfg.UseNodePodCIDRs {
		err = a.subnets.Restore(n.Name, ann.Blocks())
	}
	if err == nil {
		err = a.setNodeBlocks(n.Name, ann.Blocks())
	}
	if err != nil {
		log.WithField("node", n.Name).WithError(err).Warn("recorded node subnets not restored")
		return false
	}
	return true
}

func (a *Allocator) restorePodFromAnnotation(p *corev1.Pod) bool {
	if !NeedsAddresses(p) {
		return false
	}
	ips, ok := podAnnotationIPs(p)
	if !ok {
		return false
	}
	key := p.Namespace + "/" + p.Name
	if err := a.restorePod(key, string(p.UID), p.Spec.NodeName, ips); err != nil {
		log.WithField("pod", key).WithError(fmt.Errorf("restore %v: %w", ips, err)).Error("recorded pod addresses not restored")
		return false
	}
	return true
}
