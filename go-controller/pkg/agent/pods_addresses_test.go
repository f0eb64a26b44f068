package agent

import (
	"context"
	"net/netip"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/kovs-net/kovs/go-controller/pkg/controller/ipam"
	"github.com/kovs-net/kovs/go-controller/pkg/ovs"
	"github.com/kovs-net/kovs/go-controller/pkg/ovs/ovsfake"
)

// upgradeRig is an agent's first start after the upgrade from the release where
// kovs-controller allocated: br-int holds pod a's port (10.244.1.10) and the port of a
// pod that is gone (10.244.1.11), no high water of its own; the Node carries the old
// controller's high water (10.244.1.40); pod r runs on the node with 10.244.1.12 in its
// status but its port is not on br-int.
func upgradeRig(t *testing.T, bridgeIDs map[string]string) (*Agent, []ovs.PortInfo) {
	t.Helper()
	ctx := context.Background()
	store := ovsfake.NewOVSDB()
	if err := store.EnsureBridge(ctx, ovs.BridgeSpec{Name: "br-int", DatapathType: ovs.DatapathNetdev, ExternalIDs: bridgeIDs}); err != nil {
		t.Fatal(err)
	}
	state := NewNodeState(1, nil)
	state.SetNode(testNodeConfig())
	state.SetPod("veth-a", testPod("a", 3, 10))
	gone := attachOf("gone", 11)
	stale := []ovs.PortInfo{{Name: gone.HostIfName, Ofport: 4, ExternalIDs: portIDs(gone)}}
	pods := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	for _, p := range []*corev1.Pod{
		{ObjectMeta: metav1.ObjectMeta{Namespace: "x", Name: "a", UID: "uid-a"}, Spec: corev1.PodSpec{NodeName: "node-1"},
			Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIPs: []corev1.PodIP{{IP: "10.244.1.10"}}}},
		{ObjectMeta: metav1.ObjectMeta{Namespace: "x", Name: "r", UID: "uid-r"}, Spec: corev1.PodSpec{NodeName: "node-1"},
			Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIPs: []corev1.PodIP{{IP: "10.244.1.12"}}}},
	} {
		if err := pods.Add(p); err != nil {
			t.Fatal(err)
		}
	}
	a := &Agent{cfg: Config{NodeName: "node-1", Bridge: "br-int", AddressQuarantine: time.Minute}, store: store, state: state,
		pods: corelisters.NewPodLister(pods)}
	return a, stale
}

func upgradedNode(t *testing.T) *corev1.Node {
	t.Helper()
	ann, err := ipam.NewNodeSubnetsAnnotation([]netip.Prefix{netip.MustParsePrefix("10.244.1.0/24")})
	if err != nil {
		t.Fatal(err)
	}
	subnets, err := ann.Annotation()
	if err != nil {
		t.Fatal(err)
	}
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-1", UID: types.UID("node-1"), Annotations: map[string]string{
		ipam.NodeSubnetsAnnotationKey: subnets,
		ipam.HighWaterAnnotationKey:   `{"10.244.1.0/24":"10.244.1.40"}`}}}
}

// TestUpgradeNeverHandsOutAnAddressInUse: on its first start after the upgrade the agent
// keeps the port's address, the running pod's status address and, through the old
// controller's high water, every address the controller may have handed out: the first
// new pod gets 10.244.1.41, and br-int then records a high water of its own.
func TestUpgradeNeverHandsOutAnAddressInUse(t *testing.T) {
	a, stale := upgradeRig(t, nil)
	book, err := a.openAddressBook(context.Background(), upgradedNode(t), stale)
	if err != nil {
		t.Fatal(err)
	}
	if held := book.Lookup("uid-r"); len(held) != 1 || held[0].Address.Addr() != netip.MustParseAddr("10.244.1.12") {
		t.Errorf("the running pod without a port holds %v, want 10.244.1.12 (its status.podIPs)", held)
	}
	addrs, err := book.Allocate(context.Background(), "uid-new")
	if err != nil {
		t.Fatal(err)
	}
	if got := addrs[0].Address.Addr(); got != netip.MustParseAddr("10.244.1.41") {
		t.Errorf("the first new pod got %s, want 10.244.1.41: above the old controller's high water", got)
	}
	ids, _ := a.store.BridgeExternalIDs(context.Background(), "br-int")
	if hw, err := ipam.ParseHighWater(ids[extHighWater]); err != nil || hw[netip.MustParsePrefix("10.244.1.0/24")].Compare(netip.MustParseAddr("10.244.1.41")) < 0 {
		t.Errorf("br-int's high water after an allocation = %q (%v), want one at or above 10.244.1.41", ids[extHighWater], err)
	}
}

// TestCorruptHighWaterStopsTheAgent: a high water it cannot read stops the agent with a
// message naming the record, rather than a guess.
func TestCorruptHighWaterStopsTheAgent(t *testing.T) {
	a, stale := upgradeRig(t, map[string]string{extHighWater: `{"10.244.1.0/24":"10.9.9.9"}`})
	_, err := a.openAddressBook(context.Background(), upgradedNode(t), stale)
	if err == nil || !strings.Contains(err.Error(), "bridge br-int external_ids:"+extHighWater) {
		t.Fatalf("openAddressBook = %v, want a refusal naming br-int's %s", err, extHighWater)
	}
}
