package controller

import (
	"context"
	"fmt"
	"net/netip"
	"slices"

	log "github.com/sirupsen/logrus"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"

	"github.com/kovs-net/kovs/go-controller/pkg/controller/ipam"
)

// checkAddressPlan refuses to start with cluster CIDRs that overlap the cluster's Service
// CIDRs (its ServiceCIDR objects, networking.k8s.io/v1) or the addresses of the Nodes
// that exist: pods would take addresses the cluster already routes elsewhere. The error
// names both ranges of every overlap. A cluster whose API has no ServiceCIDR objects
// (before Kubernetes 1.33) is checked against the nodes only, with a warning.
func checkAddressPlan(ctx context.Context, client kubernetes.Interface, cluster []ipam.ClusterCIDR, nodes corelisters.NodeLister) error {
	others, err := serviceCIDRRanges(ctx, client)
	if err != nil {
		return err
	}
	list, err := nodes.List(labels.Everything())
	if err != nil {
		return err
	}
	slices.SortFunc(list, func(a, b *corev1.Node) int {
		if a.Name < b.Name {
			return -1
		}
		return 1
	})
	for _, n := range list {
		others = append(others, NodeAddressRanges(n)...)
	}
	if err := ipam.CheckClusterCIDRs(cluster, others); err != nil {
		return fmt.Errorf("refusing to start: %w", err)
	}
	return nil
}

// serviceCIDRRanges are the cluster's ServiceCIDR objects' CIDRs.
func serviceCIDRRanges(ctx context.Context, client kubernetes.Interface) ([]Range, error) {
	list, err := client.NetworkingV1().ServiceCIDRs().List(ctx, metav1.ListOptions{})
	switch {
	case apierrors.IsNotFound(err):
		log.Warn("the API serves no ServiceCIDR objects (networking.k8s.io/v1): the cluster CIDRs are not checked against the Service CIDRs")
		return nil, nil
	case apierrors.IsForbidden(err):
		log.WithError(err).Warn("may not list ServiceCIDRs (dist/rbac.yaml grants it): the cluster CIDRs are not checked against the Service CIDRs")
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list ServiceCIDRs to check the address plan: %w", err)
	}
	var out []Range
	for _, sc := range list.Items {
		for _, c := range sc.Spec.CIDRs {
			p, err := netip.ParsePrefix(c)
			if err != nil {
				continue
			}
			out = append(out, Range{Name: "Service CIDR " + sc.Name, Prefix: p.Masked()})
		}
	}
	return out, nil
}

// Range is ipam.Range, named here for brevity.
type Range = ipam.Range

// NodeAddressRanges are a Node's InternalIP and ExternalIP addresses as ranges named
// after it.
func NodeAddressRanges(n *corev1.Node) []Range {
	var out []Range
	for _, a := range n.Status.Addresses {
		if a.Type != corev1.NodeInternalIP && a.Type != corev1.NodeExternalIP {
			continue
		}
		if ip, err := netip.ParseAddr(a.Address); err == nil {
			r := Range{Name: "node " + n.Name, Prefix: netip.PrefixFrom(ip, ip.BitLen())}
			if !slices.Contains(out, r) {
				out = append(out, r)
			}
		}
	}
	return out
}
