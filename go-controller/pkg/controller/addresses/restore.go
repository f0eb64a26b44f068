package addresses

import (
	"cmp"
	"fmt"
	"net/netip"
	"slices"

	log "github.com/sirupsen/logrus"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	corelisters "k8s.io/client-go/listers/core/v1"

	"github.com/kovs-net/kovs/go-controller/pkg/controller/ipam"
)

// Restore rebuilds the allocator from the API after a (re)start, before any reconcile:
// every Node's recorded blocks and high water, then every live pod's recorded addresses.
// When two pods claim one address the pod the API shows running with it keeps it,
// whatever order the list has (claimRank); a record that names another pod's UID (a copy)
// is never restored. Conflicting or invalid records are logged and left to the
// reconcilers, which allocate afresh (a pod whose addresses conflict gets new ones only
// after it is recreated: its running sandbox keeps the old ones, so the conflict is
// reported, never silently resolved).
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
	for _, c := range rankedClaims(podList) {
		if a.restoreClaim(c) {
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
	if value, ok := n.Annotations[ipam.HighWaterAnnotationKey]; ok {
		hw, err := ipam.ParseHighWater(value)
		if err != nil {
			log.WithField("node", n.Name).WithError(err).Warn("recorded address high water not restored")
			return true
		}
		a.restoreHighWater(n.Name, hw)
	}
	return true
}

// claim is a live pod's record of its addresses.
type claim struct {
	pod  *corev1.Pod
	ips  []netip.Addr
	rank int
}

// Ranks of claims, first restored first: a pod running with its record's addresses
// before one that does not (yet), and a record that names its pod before one of a
// controller that wrote no UIDs.
const (
	rankRunningOwn = iota
	rankRunningLegacy
	rankOwn
	rankLegacy
)

// rankedClaims are the records of the pods that keep addresses, best claim first (ties in
// namespace/name order), without copies: records naming another pod's UID.
func rankedClaims(pods []*corev1.Pod) []claim {
	var claims []claim
	for _, p := range pods {
		if !keepsAddresses(p) {
			continue // a terminating pod's record is restored: it may still run with it
		}
		value, ok := p.Annotations[ipam.PodNetworkAnnotationKey]
		if !ok {
			continue
		}
		network, err := ipam.ParsePodNetwork(value)
		if err != nil {
			log.WithField("pod", p.Namespace+"/"+p.Name).WithError(err).Warn("recorded pod addresses not restored")
			continue
		}
		if network.UID != "" && network.UID != string(p.UID) {
			log.WithField("pod", p.Namespace+"/"+p.Name).WithField("recordUID", network.UID).
				Warn("pod carries the address record of another pod (a copy): not restored, it gets addresses of its own")
			continue
		}
		c := claim{pod: p, ips: network.IPs(), rank: rankLegacy}
		switch running := runsWith(p, c.ips); {
		case network.UID != "" && running:
			c.rank = rankRunningOwn
		case running:
			c.rank = rankRunningLegacy
		case network.UID != "":
			c.rank = rankOwn
		}
		claims = append(claims, c)
	}
	slices.SortStableFunc(claims, func(x, y claim) int {
		return cmp.Or(cmp.Compare(x.rank, y.rank), cmp.Compare(x.pod.Namespace, y.pod.Namespace), cmp.Compare(x.pod.Name, y.pod.Name))
	})
	return claims
}

// runsWith reports whether the API shows the pod running with every address of ips.
func runsWith(p *corev1.Pod, ips []netip.Addr) bool {
	if p.Status.Phase != corev1.PodRunning || len(ips) == 0 {
		return false
	}
	for _, ip := range ips {
		if !slices.ContainsFunc(p.Status.PodIPs, func(s corev1.PodIP) bool { return s.IP == ip.String() }) {
			return false
		}
	}
	return true
}

func (a *Allocator) restoreClaim(c claim) bool {
	key := c.pod.Namespace + "/" + c.pod.Name
	if err := a.restorePod(key, string(c.pod.UID), c.pod.Spec.NodeName, c.ips); err != nil {
		log.WithField("pod", key).WithError(fmt.Errorf("restore %v: %w", c.ips, err)).Error("recorded pod addresses not restored")
		return false
	}
	return true
}
