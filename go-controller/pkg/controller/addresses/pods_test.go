package addresses

import (
	"context"
	"fmt"
	"net/netip"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"

	"github.com/kovs-net/kovs/go-controller/pkg/controller/ipam"
)

// addressWorld is the address side over a fake API: the reconcilers read listers that
// the test fills with what the fake clientset holds (no informers, no goroutines).
type addressWorld struct {
	t      *testing.T
	client *fake.Clientset
	alloc  *Allocator
	nodes  cache.Indexer
	pods   cache.Indexer
	nodeR  *NodeReconciler
	podR   *PodReconciler
}

func newAddressWorld(t *testing.T, objects ...runtime.Object) *addressWorld {
	t.Helper()
	w := &addressWorld{t: t, client: fake.NewClientset(objects...),
		nodes: cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{}),
		pods:  cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})}
	w.restart()
	return w
}

// restart is a new controller: a new allocator rebuilt (Restore) from the API's objects.
func (w *addressWorld) restart() {
	w.t.Helper()
	alloc, err := NewAllocator(plan16)
	if err != nil {
		w.t.Fatal(err)
	}
	w.alloc = alloc
	w.sync()
	rec := record.NewFakeRecorder(100)
	w.nodeR = &NodeReconciler{Alloc: alloc, Client: w.client, Nodes: corelisters.NewNodeLister(w.nodes), Recorder: rec}
	w.podR = &PodReconciler{Alloc: alloc, Client: w.client, Pods: corelisters.NewPodLister(w.pods), Recorder: rec}
	if err := alloc.Restore(corelisters.NewNodeLister(w.nodes), corelisters.NewPodLister(w.pods)); err != nil {
		w.t.Fatal(err)
	}
}

// sync copies the fake API's Nodes and Pods into the listers, as the informers would.
func (w *addressWorld) sync() {
	w.t.Helper()
	ctx := context.Background()
	nodes, err := w.client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		w.t.Fatal(err)
	}
	pods, err := w.client.CoreV1().Pods("").List(ctx, metav1.ListOptions{})
	if err != nil {
		w.t.Fatal(err)
	}
	var nodeObjs, podObjs []any
	for i := range nodes.Items {
		nodeObjs = append(nodeObjs, &nodes.Items[i])
	}
	for i := range pods.Items {
		podObjs = append(podObjs, &pods.Items[i])
	}
	if err := w.nodes.Replace(nodeObjs, ""); err != nil {
		w.t.Fatal(err)
	}
	if err := w.pods.Replace(podObjs, ""); err != nil {
		w.t.Fatal(err)
	}
}

func (w *addressWorld) reconcileNode(name string) {
	w.t.Helper()
	w.sync()
	if err := w.nodeR.Reconcile(context.Background(), name); err != nil {
		w.t.Fatalf("reconcile node %s: %v", name, err)
	}
}

// addPod creates a pod bound to node and reconciles it; it returns the pod's address.
func (w *addressWorld) addPod(name, node string) netip.Addr {
	w.t.Helper()
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "x", Name: name, UID: types.UID("uid-" + name)},
		Spec: corev1.PodSpec{NodeName: node}}
	if _, err := w.client.CoreV1().Pods("x").Create(context.Background(), p, metav1.CreateOptions{}); err != nil {
		w.t.Fatal(err)
	}
	w.reconcilePod(name)
	return w.podIP(name)
}

func (w *addressWorld) reconcilePod(name string) {
	w.t.Helper()
	w.sync()
	if err := w.podR.Reconcile(context.Background(), "x/"+name); err != nil {
		w.t.Fatalf("reconcile pod %s: %v", name, err)
	}
}

func (w *addressWorld) deletePod(name string) {
	w.t.Helper()
	if err := w.client.CoreV1().Pods("x").Delete(context.Background(), name, metav1.DeleteOptions{}); err != nil {
		w.t.Fatal(err)
	}
	w.reconcilePod(name)
}

// podIP is the IPv4 address recorded on the pod; the zero Addr without a record.
func (w *addressWorld) podIP(name string) netip.Addr {
	w.t.Helper()
	p, err := w.client.CoreV1().Pods("x").Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		w.t.Fatal(err)
	}
	v, ok := p.Annotations[ipam.PodNetworkAnnotationKey]
	if !ok {
		return netip.Addr{}
	}
	n, err := ipam.ParsePodNetwork(v)
	if err != nil {
		w.t.Fatal(err)
	}
	return n.IPs()[0]
}

// nodeWrites counts the writes of Node objects the fake API received.
func (w *addressWorld) nodeWrites() int {
	n := 0
	for _, a := range w.client.Actions() {
		if a.GetResource().Resource == "nodes" && (a.GetVerb() == "patch" || a.GetVerb() == "update") {
			n++
		}
	}
	return n
}

func (w *addressWorld) highWater(node string) ipam.HighWater {
	w.t.Helper()
	n, err := w.client.CoreV1().Nodes().Get(context.Background(), node, metav1.GetOptions{})
	if err != nil {
		w.t.Fatal(err)
	}
	v, ok := n.Annotations[ipam.HighWaterAnnotationKey]
	if !ok {
		return nil
	}
	hw, err := ipam.ParseHighWater(v)
	if err != nil {
		w.t.Fatal(err)
	}
	return hw
}

func plainNode(name string) *corev1.Node {
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}
}

// TestNewNodeRecordsItsHighWaterWithItsSubnets: the node reconciler records the high
// water of a new node's blocks ahead of their first addresses, in the same Node write as
// the subnets; the node's first highWaterAhead pods then cost no Node write, the next one
// costs one.
func TestNewNodeRecordsItsHighWaterWithItsSubnets(t *testing.T) {
	w := newAddressWorld(t, plainNode("a"))
	w.reconcileNode("a")
	if got := w.nodeWrites(); got != 1 {
		t.Fatalf("%d Node writes for the new node's subnets, want 1", got)
	}
	block := netip.MustParsePrefix("10.244.0.0/24")
	if got, want := w.highWater("a")[block], netip.MustParseAddr("10.244.0.17"); got != want {
		t.Fatalf("recorded high water of %s: %s, want %s (the first %d addresses)", block, got, want, highWaterAhead)
	}
	for i := range highWaterAhead {
		w.addPod(fmt.Sprint("p", i), "a")
	}
	if got := w.nodeWrites(); got != 1 {
		t.Errorf("%d Node writes after %d pods, want still 1", got, highWaterAhead)
	}
	w.addPod("next", "a")
	if got := w.nodeWrites(); got != 2 {
		t.Errorf("%d Node writes after %d pods, want 2", got, highWaterAhead+1)
	}
	if got, want := w.highWater("a")[block], netip.MustParseAddr("10.244.0.34"); got != want {
		t.Errorf("recorded high water after .18: %s, want %s", got, want)
	}
	w.reconcileNode("a")
	if got := w.nodeWrites(); got != 2 {
		t.Errorf("reconciling the node again wrote it (%d writes, want 2)", got)
	}
}

// TestRestartAfterAheadRecordDoesNotHandOutAFreedAddress: an address freed just before a
// restart is not the next one handed out, though it lies below the record written ahead
// of use; live pods keep theirs and no address is handed out twice.
func TestRestartAfterAheadRecordDoesNotHandOutAFreedAddress(t *testing.T) {
	w := newAddressWorld(t, plainNode("a"))
	w.reconcileNode("a")
	var ips []netip.Addr
	for i := range 3 {
		ips = append(ips, w.addPod(fmt.Sprint("p", i), "a"))
	}
	w.deletePod("p2")
	w.restart()
	w.reconcileNode("a")
	got := w.addPod("new", "a")
	if got == ips[2] {
		t.Fatalf("the restarted controller handed out %s, freed just before the restart, at once", got)
	}
	for _, ip := range ips[:2] {
		if got == ip {
			t.Fatalf("the new pod got %s, held by a live pod", got)
		}
	}
	if want := netip.MustParseAddr("10.244.0.18"); got != want {
		t.Errorf("the new pod got %s, want %s: the first never-used address above the record", got, want)
	}
}

// TestSlowHighWaterWriteOfOneNodeDoesNotHoldUpAnother: while one node's high-water write
// hangs in kube-apiserver, a pod of another node that needs a high-water write of its own
// gets its address. Both nodes come with their subnets recorded and no high water (as a
// cluster upgraded from a controller that wrote none): their first pods each need a
// Node write.
func TestSlowHighWaterWriteOfOneNodeDoesNotHoldUpAnother(t *testing.T) {
	w := newAddressWorld(t, recordedNode(t, "a", "10.244.1.0/24"), recordedNode(t, "b", "10.244.2.0/24"))
	release := make(chan struct{})
	var once sync.Once
	defer once.Do(func() { close(release) })
	blocked := make(chan struct{})
	// A wrapper, not a reactor: the fake clientset serializes its reactors under one lock.
	w.podR.Client = gatedClient{w.client, func(node string) {
		if node == "a" {
			close(blocked)
			<-release
		}
	}}
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "x", Name: "a0", UID: "uid-a0"}, Spec: corev1.PodSpec{NodeName: "a"}}
	if _, err := w.client.CoreV1().Pods("x").Create(context.Background(), p, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	w.sync()
	slow := make(chan error, 1)
	go func() { slow <- w.podR.Reconcile(context.Background(), "x/a0") }()
	select {
	case <-blocked:
	case <-time.After(10 * time.Second):
		t.Fatal("the first pod of node a wrote no high water")
	}
	done := make(chan netip.Addr, 1)
	go func() { done <- w.addPod("b0", "b") }()
	select {
	case ip := <-done:
		if !ip.IsValid() {
			t.Error("the pod on node b got no address")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a pod of node b waited for node a's high-water write")
	}
	if w.highWater("b") == nil {
		t.Error("node b's pod got its address before node b recorded its high water")
	}
	once.Do(func() { close(release) })
	if err := <-slow; err != nil {
		t.Fatal(err)
	}
	if !w.podIP("a0").IsValid() {
		t.Error("the pod of node a got no address")
	}
}

// gatedClient calls gate with the node's name before each Node patch.
type gatedClient struct {
	*fake.Clientset
	gate func(node string)
}

func (c gatedClient) CoreV1() typedcorev1.CoreV1Interface {
	return gatedCore{c.Clientset.CoreV1(), c.gate}
}

type gatedCore struct {
	typedcorev1.CoreV1Interface
	gate func(node string)
}

func (c gatedCore) Nodes() typedcorev1.NodeInterface {
	return gatedNodes{c.CoreV1Interface.Nodes(), c.gate}
}

type gatedNodes struct {
	typedcorev1.NodeInterface
	gate func(node string)
}

func (n gatedNodes) Patch(ctx context.Context, name string, pt types.PatchType, data []byte, opts metav1.PatchOptions,
	sub ...string) (*corev1.Node, error) {
	n.gate(name)
	return n.NodeInterface.Patch(ctx, name, pt, data, opts, sub...)
}

// TestPodBeingDeletedGetsNoAddress: a pod with a deletionTimestamp and no address yet is
// given none (no allocation, no write); one that holds its address keeps it until it is
// gone, and a restart restores it.
func TestPodBeingDeletedGetsNoAddress(t *testing.T) {
	now := metav1.Now()
	w := newAddressWorld(t, plainNode("a"),
		&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "x", Name: "leaving", UID: "uid-leaving",
			DeletionTimestamp: &now, Finalizers: []string{"test/hold"}}, Spec: corev1.PodSpec{NodeName: "a"}})
	w.reconcileNode("a")
	w.client.ClearActions()
	w.reconcilePod("leaving")
	if ip := w.podIP("leaving"); ip.IsValid() {
		t.Errorf("a pod being deleted got %s", ip)
	}
	if _, ok := w.alloc.ownerOf("x/leaving"); ok {
		t.Error("a pod being deleted holds an allocation")
	}
	for _, a := range w.client.Actions() {
		if a.GetVerb() != "get" && a.GetVerb() != "list" {
			t.Errorf("a pod being deleted cost a %s of %s", a.GetVerb(), a.GetResource().Resource)
		}
	}

	held := w.addPod("held", "a")
	p, err := w.client.CoreV1().Pods("x").Get(context.Background(), "held", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	p.DeletionTimestamp, p.Finalizers = &now, []string{"test/hold"}
	p.Status = corev1.PodStatus{Phase: corev1.PodRunning, PodIPs: []corev1.PodIP{{IP: held.String()}}}
	if _, err := w.client.CoreV1().Pods("x").Update(context.Background(), p, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	w.reconcilePod("held")
	if _, ok := w.alloc.ownerOf("x/held"); !ok {
		t.Fatal("a terminating pod lost its address before it is gone")
	}
	w.restart()
	w.reconcileNode("a")
	if got := w.addPod("other", "a"); got == held {
		t.Errorf("after a restart the terminating pod's %s went to another pod", held)
	}
}
