package agent

import (
	"context"
	"errors"
	"net/netip"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/kovs-net/kovs/go-controller/pkg/cni"
	"github.com/kovs-net/kovs/go-controller/pkg/controller/ipam"
)

// addOf is the CNI ADD of pod x/<name> in sandbox <sandbox>.
func addOf(name, sandbox string) cni.AddRequest {
	return cni.AddRequest{ContainerID: sandbox, Netns: "/var/run/netns/" + sandbox, IfName: "eth0",
		Pod: cni.PodRef{Namespace: "x", Name: name, UID: "uid-" + name}, HostIfName: "veth-" + sandbox}
}

// addedIP runs Add without NetworkPolicy and returns the pod's IPv4 address.
func addedIP(t *testing.T, r *attachRig, req cni.AddRequest) netip.Addr {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	cfg, err := r.ports.Add(ctx, req)
	if err != nil {
		t.Fatalf("Add %s: %v", req.Pod, err)
	}
	prefix := netip.MustParsePrefix(cfg.IPs[0].Address)
	if want := ipam.DeriveMAC(prefix.Addr()).String(); cfg.MAC != want {
		t.Errorf("Add %s: MAC %s, want %s (derived from the address)", req.Pod, cfg.MAC, want)
	}
	return prefix.Addr()
}

func noPolicy(r *attachRig) {
	r.state.mu.Lock()
	r.state.policy = nil
	r.state.mu.Unlock()
}

// TestAddHandsOutTheNodesOwnAddresses: the agent allocates from its node's block, never an
// address another pod's port holds; a retried ADD of the same pod (a new sandbox, no DEL)
// gets the same address and replaces the old port; DEL releases it, and the next pod does
// not get it while never-used addresses remain.
func TestAddHandsOutTheNodesOwnAddresses(t *testing.T) {
	r := newAttachRig(t, time.Second)
	noPolicy(r)
	c := addedIP(t, r, addOf("c", "s1"))
	if c != netip.MustParseAddr("10.244.1.12") {
		t.Errorf("pod c got %s, want 10.244.1.12 (a and b hold .10 and .11)", c)
	}
	if again := addedIP(t, r, addOf("c", "s2")); again != c {
		t.Errorf("a retried ADD of pod c got %s, want its address %s", again, c)
	}
	if _, ok := r.state.Pods()["veth-s1"]; ok {
		t.Error("the port of pod c's replaced sandbox is still in the state")
	}
	ctx := context.Background()
	if err := r.ports.Detach(ctx, cni.DetachRequest{ContainerID: "s2", IfName: "eth0", Pod: addOf("c", "s2").Pod}); err != nil {
		t.Fatal(err)
	}
	if len(r.ports.book.Lookup("uid-c")) != 0 {
		t.Fatal("DEL left pod c's address allocated")
	}
	if d := addedIP(t, r, addOf("d", "s3")); d == c || d != netip.MustParseAddr("10.244.1.13") {
		t.Errorf("pod d got %s: want the next never-used address 10.244.1.13, never c's freed %s", d, c)
	}
}

// TestDelOfAnOldSandboxKeepsTheNewOnesAddress: the DEL of a pod's replaced sandbox that
// comes after the new sandbox's ADD does not release the addresses the new one uses.
func TestDelOfAnOldSandboxKeepsTheNewOnesAddress(t *testing.T) {
	r := newAttachRig(t, time.Second)
	noPolicy(r)
	c := addedIP(t, r, addOf("c", "s1"))
	addedIP(t, r, addOf("c", "s2"))
	if err := r.ports.Detach(context.Background(), cni.DetachRequest{ContainerID: "s1", IfName: "eth0"}); err != nil {
		t.Fatal(err)
	}
	if held := r.ports.book.Lookup("uid-c"); len(held) != 1 || held[0].Address.Addr() != c {
		t.Fatalf("after the old sandbox's DEL pod c holds %v, want %s", held, c)
	}
}

// TestAddIgnoresAForgedAnnotation is the forged-annotation attack: a pod carrying a copy
// of pod a's kovs.io/pod-network record (from the release where kovs-controller wrote it)
// gets an address of its own; a's address is never handed out twice.
func TestAddIgnoresAForgedAnnotation(t *testing.T) {
	r := newAttachRig(t, time.Second)
	noPolicy(r)
	forged, err := ipam.NewPodNetwork([]ipam.PodAddress{{Address: netip.MustParsePrefix("10.244.1.10/24"), Gateway: netip.MustParseAddr("10.244.1.1")}})
	if err != nil {
		t.Fatal(err)
	}
	forged.UID = "uid-a"
	value, err := forged.Annotation()
	if err != nil {
		t.Fatal(err)
	}
	idx := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	if err := idx.Add(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "x", Name: "c", UID: types.UID("uid-c"),
		Annotations: map[string]string{ipam.PodNetworkAnnotationKey: value}}, Spec: corev1.PodSpec{NodeName: "node-1"}}); err != nil {
		t.Fatal(err)
	}
	r.ports.pods = corelisters.NewPodLister(idx)
	if c := addedIP(t, r, addOf("c", "s1")); c == netip.MustParseAddr("10.244.1.10") {
		t.Fatalf("pod c with a copy of a's record got a's address %s", c)
	}
}

// TestAddOfAFullBlockSaysWhatToChange: with every address held, ADD fails with try-again,
// naming the node, the block and the flags; nothing is left allocated or plugged.
func TestAddOfAFullBlockSaysWhatToChange(t *testing.T) {
	r := newAttachRig(t, time.Second)
	noPolicy(r)
	for i := 0; ; i++ {
		uid := "filler-" + string(rune('a'+i%26)) + strings.Repeat("x", i/26)
		if _, err := r.ports.book.Allocate(context.Background(), uid); err != nil {
			break
		}
	}
	_, err := r.ports.Add(context.Background(), addOf("c", "s1"))
	var cniErr *cni.Error
	if !errors.As(err, &cniErr) || cniErr.Code != cni.CodeTryAgainLater {
		t.Fatalf("Add into a full block = %v, want try again later", err)
	}
	for _, want := range []string{"node-1", "10.244.1.0/24", "--ipv4-block-size"} {
		if !strings.Contains(cniErr.Msg, want) {
			t.Errorf("the error %q does not say %q", cniErr.Msg, want)
		}
	}
	if _, ok := r.state.Pods()["veth-s1"]; ok || len(r.ports.book.Lookup("uid-c")) != 0 {
		t.Error("the refused ADD left a port or an address behind")
	}
}

// podsOnNode is a pod lister with pods x/<name> (UID uid-<name>) on node-1.
func podsOnNode(t *testing.T, names ...string) corelisters.PodLister {
	t.Helper()
	idx := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	for _, name := range names {
		if err := idx.Add(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "x", Name: name, UID: types.UID("uid-" + name)},
			Spec: corev1.PodSpec{NodeName: "node-1"}}); err != nil {
			t.Fatal(err)
		}
	}
	return corelisters.NewPodLister(idx)
}

// attachOf is the port of pod x/<name> at 10.244.1.<host> with its MAC.
func attachOf(name string, host int) cni.AttachRequest {
	ip := netip.AddrFrom4([4]byte{10, 244, 1, byte(host)})
	mac := ipam.DeriveMAC(ip)
	return cni.AttachRequest{ContainerID: "sandbox-" + name, Netns: "/var/run/netns/" + name, IfName: "eth0",
		Pod: cni.PodRef{Namespace: "x", Name: name, UID: "uid-" + name}, HostIfName: "veth-" + name, MAC: mac.String(),
		IPs: []cni.IPConfig{{Address: ip.String() + "/24", Gateway: "10.244.1.1"}}}
}

// TestTwoPodsOfOneNameInQuickSuccession: a pod deleted and created again under the same
// name (a new UID) whose ADD comes before the old one's DEL gets an address of its own;
// the old pod's DEL then releases only the old pod's address.
func TestTwoPodsOfOneNameInQuickSuccession(t *testing.T) {
	r := newAttachRig(t, time.Second)
	noPolicy(r)
	old := addOf("c", "s1")
	oldIP := addedIP(t, r, old)
	again := addOf("c", "s2")
	again.Pod.UID = "uid-c-again"
	newIP := addedIP(t, r, again)
	if newIP == oldIP {
		t.Fatalf("the new pod of the same name got the old one's address %s", oldIP)
	}
	if _, ok := r.state.Pods()["veth-s1"]; !ok {
		t.Error("the new pod's ADD removed the old pod's port (another UID): only its own sandboxes are replaced")
	}
	if err := r.ports.Detach(context.Background(), cni.DetachRequest{ContainerID: "s1", IfName: "eth0", Pod: old.Pod}); err != nil {
		t.Fatal(err)
	}
	if len(r.ports.book.Lookup("uid-c")) != 0 {
		t.Error("the old pod's DEL left its address allocated")
	}
	if held := r.ports.book.Lookup("uid-c-again"); len(held) != 1 || held[0].Address.Addr() != newIP {
		t.Errorf("after the old pod's DEL the new pod holds %v, want %s", held, newIP)
	}
}
