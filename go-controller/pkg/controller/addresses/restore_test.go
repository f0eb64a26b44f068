package addresses

import (
	"net/netip"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	corelisters "k8s.io/client-go/listers/core/v1"

	"github.com/kovs-net/kovs/go-controller/pkg/controller/ipam"
)

type listedNodes struct {
	corelisters.NodeLister
	nodes []*corev1.Node
}

func (l listedNodes) List(labels.Selector) ([]*corev1.Node, error) { return l.nodes, nil }

func recordedNode(t *testing.T, name, block string) *corev1.Node {
	ann, err := ipam.NewNodeSubnetsAnnotation([]netip.Prefix{netip.MustParsePrefix(block)})
	if err != nil {
		t.Fatal(err)
	}
	v, err := ann.Annotation()
	if err != nil {
		t.Fatal(err)
	}
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: map[string]string{ipam.NodeSubnetsAnnotationKey: v}}}
}

// TestRestoreKeepsTheNodesBlocks: after a restart the recorded blocks are the nodes'
// again, and a new node never gets one of them.
func TestRestoreKeepsTheNodesBlocks(t *testing.T) {
	a, err := NewAllocator(Config{ClusterCIDRs: []ipam.ClusterCIDR{mustCIDR(t, "10.244.0.0/16", 24)}})
	if err != nil {
		t.Fatal(err)
	}
	nodes := listedNodes{nodes: []*corev1.Node{recordedNode(t, "a", "10.244.0.0/24"), recordedNode(t, "b", "10.244.1.0/24")}}
	if err := a.Restore(nodes); err != nil {
		t.Fatal(err)
	}
	if got := a.Usage().ClusterCIDRs[0].Nodes; got != 2 {
		t.Errorf("restored nodes = %d, want 2", got)
	}
	blocks, err := a.subnets.Allocate("c")
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range blocks {
		if b == netip.MustParsePrefix("10.244.0.0/24") || b == netip.MustParsePrefix("10.244.1.0/24") {
			t.Errorf("new node c got %s, a restored node's block", b)
		}
	}
}

func mustCIDR(t *testing.T, cidr string, block int) ipam.ClusterCIDR {
	c, err := ipam.ParseClusterCIDR(cidr, block)
	if err != nil {
		t.Fatal(err)
	}
	return c
}
