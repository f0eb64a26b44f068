package addresses

import (
	"context"
	"net/netip"
	"slices"
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

func nodeWithIPs(name string, ips ...string) *corev1.Node {
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}
	n.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeHostName, Address: name}}
	for _, ip := range ips {
		n.Status.Addresses = append(n.Status.Addresses, corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: ip})
	}
	return n
}

// identityRig is a NodeReconciler whose lister follows the fake API's Nodes.
type identityRig struct {
	r      *NodeReconciler
	client *fake.Clientset
	idx    cache.Indexer
	rec    *record.FakeRecorder
}

func newIdentityRig(t *testing.T, nodes ...*corev1.Node) *identityRig {
	t.Helper()
	alloc, err := NewAllocator(plan16)
	if err != nil {
		t.Fatal(err)
	}
	g := &identityRig{client: fake.NewSimpleClientset(), idx: cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{}),
		rec: record.NewFakeRecorder(20)}
	for _, n := range nodes {
		if _, err := g.client.CoreV1().Nodes().Create(context.Background(), n, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	g.r = &NodeReconciler{Alloc: alloc, Client: g.client, Nodes: corelisters.NewNodeLister(g.idx), Recorder: g.rec}
	return g
}

// reconcile syncs the lister with the API, as the informer would, and reconciles node.
func (g *identityRig) reconcile(t *testing.T, name string) {
	t.Helper()
	list, err := g.client.CoreV1().Nodes().List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for i := range list.Items {
		_ = g.idx.Update(&list.Items[i])
	}
	if err := g.r.Reconcile(context.Background(), name); err != nil {
		t.Fatalf("reconcile %s: %v", name, err)
	}
}

func (g *identityRig) recorded(t *testing.T, name string) []netip.Addr {
	t.Helper()
	n, err := g.client.CoreV1().Nodes().Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	value, ok := n.Annotations[ipam.NodeAddressesAnnotationKey]
	if !ok {
		t.Fatalf("%s has no %s", name, ipam.NodeAddressesAnnotationKey)
	}
	addrs, err := ipam.ParseNodeAddressesAnnotation(value)
	if err != nil {
		t.Fatal(err)
	}
	return addrs
}

// setIPs is the node's kubelet writing its addresses.
func (g *identityRig) setIPs(t *testing.T, name string, ips ...string) {
	t.Helper()
	n, err := g.client.CoreV1().Nodes().Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	n.Status.Addresses = nodeWithIPs(name, ips...).Status.Addresses
	if _, err := g.client.CoreV1().Nodes().UpdateStatus(context.Background(), n, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

func addrs(ips ...string) []netip.Addr {
	var out []netip.Addr
	for _, ip := range ips {
		out = append(out, netip.MustParseAddr(ip))
	}
	return out
}

// TestNodeCannotTakeAnotherNodesAddress: a node's kubelet claiming another node's
// InternalIP, as its first or as a second one, gets it neither recorded nor taken from the
// holder; the claim is an Event on the claimant. The holder keeps it through its own
// reconciles, and a deleted holder's address is free again.
func TestNodeCannotTakeAnotherNodesAddress(t *testing.T) {
	g := newIdentityRig(t, nodeWithIPs("n2", "172.31.0.2"), nodeWithIPs("n3", "172.31.0.3", "fd00::3"))
	g.reconcile(t, "n2")
	g.reconcile(t, "n3")
	if got := g.recorded(t, "n3"); !slices.Equal(got, addrs("172.31.0.3", "fd00::3")) {
		t.Fatalf("n3 recorded %v", got)
	}
	for _, claim := range [][]string{{"172.31.0.3", "172.31.0.2"}, {"172.31.0.2", "172.31.0.3"}} {
		g.setIPs(t, "n3", claim...)
		g.reconcile(t, "n3")
		if got := g.recorded(t, "n3"); !slices.Equal(got, addrs("172.31.0.3")) {
			t.Errorf("n3 claiming %v: recorded %v, want only its own 172.31.0.3", claim, got)
		}
		select {
		case ev := <-g.rec.Events:
			if !strings.Contains(ev, ReasonAddressTaken) || !strings.Contains(ev, "172.31.0.2 (node n2's)") {
				t.Errorf("n3 claiming %v: event %q", claim, ev)
			}
		default:
			t.Errorf("n3 claiming %v: no %s event", claim, ReasonAddressTaken)
		}
		g.reconcile(t, "n2")
		if got := g.recorded(t, "n2"); !slices.Equal(got, addrs("172.31.0.2")) {
			t.Errorf("n3 claiming %v: n2 recorded %v", claim, got)
		}
	}
	// A restarted controller knows the holders from the records alone.
	fresh := newIdentityRig(t)
	fresh.client, fresh.idx = g.client, g.idx
	fresh.r.Client, fresh.r.Nodes = g.client, corelisters.NewNodeLister(g.idx)
	fresh.reconcile(t, "n3")
	if got := fresh.recorded(t, "n3"); !slices.Equal(got, addrs("172.31.0.3")) {
		t.Errorf("after a restart n3 recorded %v", got)
	}
	// n2 deleted: its address is free.
	if err := g.client.CoreV1().Nodes().Delete(context.Background(), "n2", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	_ = g.idx.Delete(nodeWithIPs("n2"))
	if err := g.r.Reconcile(context.Background(), "n2"); err != nil {
		t.Fatal(err)
	}
	g.reconcile(t, "n3")
	if got := g.recorded(t, "n3"); !slices.Equal(got, addrs("172.31.0.2", "172.31.0.3")) {
		t.Errorf("with n2 gone, n3 recorded %v", got)
	}
}

// TestTwoNewNodesClaimingOneAddressGetItOnce: before either is recorded, the node
// reconciled first holds the address, even while the lister has not seen its record.
func TestTwoNewNodesClaimingOneAddressGetItOnce(t *testing.T) {
	g := newIdentityRig(t, nodeWithIPs("n1", "172.31.0.9"), nodeWithIPs("n2", "172.31.0.9", "172.31.0.2"))
	g.reconcile(t, "n1")
	if err := g.r.Reconcile(context.Background(), "n2"); err != nil { // the lister still without n1's record
		t.Fatal(err)
	}
	if got := g.recorded(t, "n2"); !slices.Equal(got, addrs("172.31.0.2")) {
		t.Errorf("n2 recorded %v, want 172.31.0.2 only (172.31.0.9 is n1's)", got)
	}
}
