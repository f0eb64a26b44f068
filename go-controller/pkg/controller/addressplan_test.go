package controller

import (
	"context"
	"net/netip"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/kovs-net/kovs/go-controller/pkg/controller/ipam"
)

func TestAddressPlanRefusesOverlapsNamingBothRanges(t *testing.T) {
	svc := &networkingv1.ServiceCIDR{ObjectMeta: metav1.ObjectMeta{Name: "kubernetes"}, Spec: networkingv1.ServiceCIDRSpec{CIDRs: []string{"10.96.0.0/16"}}}
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node1"},
		Status: corev1.NodeStatus{Addresses: []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "172.30.0.1"}}}}
	idx := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	_ = idx.Add(node)
	nodes := corelisters.NewNodeLister(idx)
	client := fake.NewSimpleClientset(svc, node)
	check := func(cidr string) error {
		return checkAddressPlan(context.Background(), client, []ipam.ClusterCIDR{{CIDR: netip.MustParsePrefix(cidr), BlockBits: 24}}, nodes)
	}
	if err := check("10.244.0.0/16"); err != nil {
		t.Errorf("a plan without overlaps refused: %v", err)
	}
	if err := check("10.96.0.0/12"); err == nil || !strings.Contains(err.Error(), "cluster CIDR 10.96.0.0/12 overlaps Service CIDR kubernetes 10.96.0.0/16") {
		t.Errorf("cluster CIDR over the Service CIDR: %v", err)
	}
	if err := check("172.30.0.0/16"); err == nil || !strings.Contains(err.Error(), "cluster CIDR 172.30.0.0/16 overlaps node node1 172.30.0.1/32") {
		t.Errorf("cluster CIDR over a node: %v", err)
	}
}
