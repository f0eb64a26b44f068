package addresses

import (
	"context"
	"net/netip"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"

	"github.com/kovs-net/kovs/go-controller/pkg/controller/ipam"
)

func reconcileNode(t *testing.T, cfg Config, node *corev1.Node) (*fake.Clientset, *record.FakeRecorder) {
	t.Helper()
	alloc, err := NewAllocator(cfg)
	if err != nil {
		t.Fatal(err)
	}
	client := fake.NewSimpleClientset(node)
	idx := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	_ = idx.Add(node)
	rec := record.NewFakeRecorder(10)
	r := &NodeReconciler{Alloc: alloc, Client: client, Nodes: corelisters.NewNodeLister(idx), Recorder: rec}
	if err := r.Reconcile(context.Background(), node.Name); err != nil {
		t.Fatalf("reconcile: %v", err)
	}
	return client, rec
}

func networkUnavailable(t *testing.T, client *fake.Clientset, name string) corev1.NodeCondition {
	t.Helper()
	n, err := client.CoreV1().Nodes().Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeNetworkUnavailable {
			return c
		}
	}
	return corev1.NodeCondition{}
}

var plan16 = Config{ClusterCIDRs: []ipam.ClusterCIDR{{CIDR: netip.MustParsePrefix("10.244.0.0/16"), BlockBits: 24}}}

func TestNodeAddressInsideAPodCIDRIsReported(t *testing.T) {
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"},
		Status: corev1.NodeStatus{Addresses: []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "10.244.3.7"}}}}
	client, rec := reconcileNode(t, plan16, node)
	ev := <-rec.Events
	if !strings.Contains(ev, ReasonAddressInPodCIDR) || !strings.Contains(ev, "10.244.3.7") || !strings.Contains(ev, "10.244.0.0/16") {
		t.Errorf("event %q", ev)
	}
	if c := networkUnavailable(t, client, "n1"); c.Status != corev1.ConditionTrue || !strings.Contains(c.Message, "10.244.0.0/16") {
		t.Errorf("NetworkUnavailable %+v", c)
	}
	if n, _ := client.CoreV1().Nodes().Get(context.Background(), "n1", metav1.GetOptions{}); n.Annotations[ipam.NodeSubnetsAnnotationKey] != "" {
		t.Errorf("the node got subnets: %v", n.Annotations)
	}
}

func TestPodCIDROutsideTheClusterCIDRsIsRefused(t *testing.T) {
	cfg := plan16
	cfg.UseNodePodCIDRs = true
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n2"}, Spec: corev1.NodeSpec{PodCIDRs: []string{"10.245.0.0/24"}},
		Status: corev1.NodeStatus{Addresses: []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "172.30.0.2"}}}}
	client, rec := reconcileNode(t, cfg, node)
	ev := <-rec.Events
	if !strings.Contains(ev, ReasonPodCIDROutside) || !strings.Contains(ev, "10.245.0.0/24") || !strings.Contains(ev, "10.244.0.0/16") {
		t.Errorf("event %q", ev)
	}
	if c := networkUnavailable(t, client, "n2"); c.Status != corev1.ConditionTrue || !strings.Contains(c.Message, "10.245.0.0/24") {
		t.Errorf("NetworkUnavailable %+v", c)
	}
	node.Spec.PodCIDRs = []string{"10.244.9.0/24"}
	client, _ = reconcileNode(t, cfg, node)
	if n, _ := client.CoreV1().Nodes().Get(context.Background(), "n2", metav1.GetOptions{}); !strings.Contains(n.Annotations[ipam.NodeSubnetsAnnotationKey], "10.244.9.0/24") {
		t.Errorf("a podCIDR inside the cluster CIDRs is not taken: %v", n.Annotations)
	}
}
