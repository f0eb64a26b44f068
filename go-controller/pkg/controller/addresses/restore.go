package addresses

import (
	log "github.com/sirupsen/logrus"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	corelisters "k8s.io/client-go/listers/core/v1"

	"github.com/kovs-net/kovs/go-controller/pkg/controller/ipam"
)

// Restore rebuilds the allocator from the API after a (re)start, before any reconcile:
// every Node's recorded blocks. Invalid or conflicting records are logged and left to the
// node reconciler.
func (a *Allocator) Restore(nodes corelisters.NodeLister) error {
	nodeList, err := nodes.List(labels.Everything())
	if err != nil {
		return err
	}
	restored := 0
	for _, n := range nodeList {
		if a.restoreNode(n) {
			restored++
		}
	}
	log.WithField("nodes", restored).Info("node subnets rebuilt from the API")
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
	if err != nil {
		log.WithField("node", n.Name).WithError(err).Warn("recorded node subnets not restored")
		return false
	}
	a.setNodeBlocks(n.Name, ann.Blocks())
	return true
}
