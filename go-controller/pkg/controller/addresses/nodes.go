package addresses

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"

	log "github.com/sirupsen/logrus"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/record"

	"github.com/kovs-net/kovs/go-controller/pkg/controller/ipam"
)

// Reasons of the Events and conditions the node side writes.
const (
	ReasonSubnetExhausted = "NodeSubnetExhausted"
	ReasonSubnetConflict  = "NodeSubnetConflict"
	// ReasonAddressInPodCIDR: the node's own address is inside a cluster CIDR.
	ReasonAddressInPodCIDR = "NodeAddressInPodCIDR"
	// ReasonPodCIDROutside: in spec.podCIDRs mode, the node's podCIDR is outside the
	// cluster CIDRs.
	ReasonPodCIDROutside = "NodePodCIDROutsideClusterCIDRs"
	reasonNoSubnet       = "NoNodeSubnet"
	reasonNoPodCIDRs     = "NoPodCIDRs"
)

// NodeReconciler gives each Node its subnets.
type NodeReconciler struct {
	Alloc    *Allocator
	Client   kubernetes.Interface
	Nodes    corelisters.NodeLister
	Recorder record.EventRecorder
	// holders are the nodes' recorded tunnel addresses (node_identity.go).
	holders addressHolders
}

// Reconcile allocates (or adopts) the node's blocks and records them on the Node; a
// deleted node's blocks are freed.
func (r *NodeReconciler) Reconcile(ctx context.Context, name string) error {
	node, err := r.Nodes.Get(name)
	if apierrors.IsNotFound(err) {
		r.Alloc.dropNode(name)
		r.holders.drop(name)
		log.WithField("node", name).Info("node deleted, subnets and addresses released")
		return nil
	}
	if err != nil {
		return err
	}
	if err := r.checkAddresses(node); err != nil {
		return r.reportNoSubnet(ctx, node, err)
	}
	blocks, err := r.blocksFor(node)
	if err != nil {
		return r.reportNoSubnet(ctx, node, err)
	}
	r.Alloc.setNodeBlocks(name, blocks)
	addrs, taken, err := r.tunnelAddresses(node)
	if err != nil {
		return err
	}
	if len(taken) > 0 {
		r.reportTaken(node, taken)
	}
	if err := r.annotate(ctx, node, blocks, addrs); err != nil {
		return err
	}
	r.holders.set(name, addrs)
	return nil
}

func (r *NodeReconciler) blocksFor(node *corev1.Node) ([]netip.Prefix, error) {
	if r.Alloc.cfg.UseNodePodCIDRs {
		if len(node.Spec.PodCIDRs) == 0 {
			return nil, fmt.Errorf("node has no spec.podCIDRs yet (kube-controller-manager --allocate-node-cidrs assigns them)")
		}
		var blocks []netip.Prefix
		for _, c := range node.Spec.PodCIDRs {
			p, err := netip.ParsePrefix(c)
			if err != nil {
				return nil, fmt.Errorf("spec.podCIDRs %q: %w", c, err)
			}
			p = p.Masked()
			if !r.insideCluster(p) {
				return nil, &planError{reason: ReasonPodCIDROutside, msg: fmt.Sprintf(
					"spec.podCIDRs %s is outside the cluster CIDRs %v: kube-controller-manager's --cluster-cidr must lie within kovs-controller's --cluster-cidrs",
					p, r.clusterPrefixes())}
			}
			blocks = append(blocks, p)
		}
		return blocks, nil
	}
	return r.Alloc.subnets.Allocate(node.Name)
}

// planError is a node the address plan cannot serve: an Event with its reason, and the
// node stays NetworkUnavailable until the Node changes.
type planError struct{ reason, msg string }

func (e *planError) Error() string { return e.msg }

// checkAddresses refuses a node whose own address lies inside a cluster CIDR: its pods'
// addresses would collide with the node's.
func (r *NodeReconciler) checkAddresses(node *corev1.Node) error {
	for _, a := range node.Status.Addresses {
		if a.Type != corev1.NodeInternalIP && a.Type != corev1.NodeExternalIP {
			continue
		}
		ip, err := netip.ParseAddr(a.Address)
		if err != nil {
			continue
		}
		for _, c := range r.Alloc.cfg.ClusterCIDRs {
			if c.CIDR.Contains(ip) {
				return &planError{reason: ReasonAddressInPodCIDR, msg: fmt.Sprintf(
					"node %s's address %s (%s) is inside cluster CIDR %s: pods would take addresses of the node network; choose cluster CIDRs outside it",
					node.Name, ip, a.Type, c.CIDR)}
			}
		}
	}
	return nil
}

func (r *NodeReconciler) insideCluster(p netip.Prefix) bool {
	for _, c := range r.Alloc.cfg.ClusterCIDRs {
		if c.CIDR.Bits() <= p.Bits() && c.CIDR.Contains(p.Addr()) {
			return true
		}
	}
	return false
}

func (r *NodeReconciler) clusterPrefixes() []netip.Prefix {
	var out []netip.Prefix
	for _, c := range r.Alloc.cfg.ClusterCIDRs {
		out = append(out, c.CIDR)
	}
	return out
}

// annotate writes kovs.io/node-subnets and kovs.io/node-addresses if they differ.
func (r *NodeReconciler) annotate(ctx context.Context, node *corev1.Node, blocks []netip.Prefix, addrs []netip.Addr) error {
	ann, err := ipam.NewNodeSubnetsAnnotation(blocks)
	if err != nil {
		return err
	}
	value, err := ann.Annotation()
	if err != nil {
		return err
	}
	changes := map[string]string{}
	if node.Annotations[ipam.NodeSubnetsAnnotationKey] != value {
		changes[ipam.NodeSubnetsAnnotationKey] = value
	}
	recorded, err := ipam.NodeAddressesAnnotation(addrs)
	if err != nil {
		return err
	}
	if old, ok := node.Annotations[ipam.NodeAddressesAnnotationKey]; !ok || old != recorded {
		changes[ipam.NodeAddressesAnnotationKey] = recorded
	}
	if len(changes) == 0 {
		return nil
	}
	if err := patchAnnotations(ctx, r.Client.CoreV1().Nodes(), node.Name, changes); err != nil {
		return fmt.Errorf("record subnets on node %s: %w", node.Name, err)
	}
	if _, ok := changes[ipam.NodeSubnetsAnnotationKey]; ok {
		log.WithField("node", node.Name).WithField("subnets", value).Info("node subnets assigned")
	}
	return nil
}

// reportNoSubnet makes exhaustion loud: an Event and a log line naming the CIDR, block size
// and node cap, and the node's NetworkUnavailable condition stays True.
func (r *NodeReconciler) reportNoSubnet(ctx context.Context, node *corev1.Node, cause error) error {
	reason := reasonNoPodCIDRs
	var exhausted *ipam.SubnetExhaustedError
	var plan *planError
	if errors.As(cause, &plan) {
		reason = plan.reason
	} else if errors.As(cause, &exhausted) {
		reason = ReasonSubnetExhausted
	} else if errors.Is(cause, ipam.ErrConflict) {
		reason = ReasonSubnetConflict
	}
	log.WithField("node", node.Name).WithError(cause).Error("node gets no pod subnet")
	r.Recorder.Event(node, corev1.EventTypeWarning, reason, cause.Error())
	cond := corev1.NodeCondition{Type: corev1.NodeNetworkUnavailable, Status: corev1.ConditionTrue,
		Reason: reasonNoSubnet, Message: cause.Error(), LastTransitionTime: metav1.Now(), LastHeartbeatTime: metav1.Now()}
	if err := setNodeCondition(ctx, r.Client, node.Name, cond); err != nil {
		return err
	}
	if reason == reasonNoPodCIDRs {
		return cause // retry: podCIDRs may come
	}
	return nil // a new Node or a freed block re-triggers allocation
}

// setNodeCondition patches one condition into the node's status.
func setNodeCondition(ctx context.Context, client kubernetes.Interface, node string, cond corev1.NodeCondition) error {
	patch, err := json.Marshal(map[string]any{"status": map[string]any{"conditions": []corev1.NodeCondition{cond}}})
	if err != nil {
		return err
	}
	_, err = client.CoreV1().Nodes().PatchStatus(ctx, node, patch)
	return err
}

type annotationPatcher[T any] interface {
	Patch(ctx context.Context, name string, pt types.PatchType, data []byte, opts metav1.PatchOptions, subresources ...string) (T, error)
}

// patchAnnotations sets the annotations of changes (key to value) in one merge patch.
func patchAnnotations[T any](ctx context.Context, c annotationPatcher[T], name string, changes map[string]string) error {
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": changes}})
	if err != nil {
		return err
	}
	_, err = c.Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{})
	return err
}
