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

	"github.com/kovs-net/kovs/go-controller/pkg/cni"
	"github.com/kovs-net/kovs/go-controller/pkg/controller/ipam"
)

// recordedPods is a pod lister with pods x/<name> (UID uid-<name>) on node-1, each with
// the kovs.io/pod-network record of 10.244.1.<host> for recordUID ("" for none).
func recordedPods(t *testing.T, pods ...recorded) corelisters.PodLister {
	t.Helper()
	idx := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	for _, p := range pods {
		network, err := ipam.NewPodNetwork([]ipam.PodAddress{{Address: netip.PrefixFrom(netip.AddrFrom4([4]byte{10, 244, 1, byte(p.host)}), 24),
			Gateway: netip.MustParseAddr("10.244.1.1")}})
		if err != nil {
			t.Fatal(err)
		}
		network.UID = p.recordUID
		v, err := network.Annotation()
		if err != nil {
			t.Fatal(err)
		}
		if err := idx.Add(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "x", Name: p.name, UID: types.UID("uid-" + p.name),
			Annotations: map[string]string{ipam.PodNetworkAnnotationKey: v}}, Spec: corev1.PodSpec{NodeName: "node-1"}}); err != nil {
			t.Fatal(err)
		}
	}
	return corelisters.NewPodLister(idx)
}

type recorded struct {
	name      string
	host      int
	recordUID string
}

// attachOf is the attach request of pod x/<name> at 10.244.1.<host> with its MAC.
func attachOf(name string, host int) cni.AttachRequest {
	ip := netip.AddrFrom4([4]byte{10, 244, 1, byte(host)})
	mac := ipam.DeriveMAC(ip)
	return cni.AttachRequest{ContainerID: "sandbox-" + name, Netns: "/var/run/netns/" + name, IfName: "eth0",
		Pod: cni.PodRef{Namespace: "x", Name: name, UID: "uid-" + name}, HostIfName: "veth-" + name, MAC: mac.String(),
		IPs: []cni.IPConfig{{Address: ip.String() + "/24", Gateway: "10.244.1.1"}}}
}

// TestAgentPlugsOnlyThePodsOwnAddress is the forged-annotation attack at the agent (issue
// 14): pod a (10.244.1.10) runs on the node; a pod carrying a copy of a's record (a's
// UID), or a's address under its own UID, or a record without a UID is never plugged,
// nor is an attach request whose addresses differ from the pod's record. The pod's own
// record, with an address no other port holds, is.
func TestAgentPlugsOnlyThePodsOwnAddress(t *testing.T) {
	r := newAttachRig(t, 500*time.Millisecond) // the share never lists c: its policy wait runs out
	r.ports.wait = 300 * time.Millisecond
	cases := []struct {
		name   string
		pod    recorded
		attach cni.AttachRequest
		want   string // "" plugged; else a word of the refusal
	}{
		{"a copy of a's record", recorded{"c", 10, "uid-a"}, attachOf("c", 10), "pod UID uid-a"},
		{"a's address under its own UID", recorded{"c", 10, "uid-c"}, attachOf("c", 10), "held by port veth-a"},
		{"a record without a UID", recorded{"c", 12, ""}, attachOf("c", 12), "names no pod UID"},
		{"a request off the record", recorded{"c", 12, "uid-c"}, attachOf("c", 13), "not those kovs-controller allocated"},
		{"its own record", recorded{"c", 12, "uid-c"}, attachOf("c", 12), ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r.ports.pods = recordedPods(t, recorded{"a", 10, "uid-a"}, recorded{"b", 11, "uid-b"}, tc.pod)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			_, netErr := r.ports.PodNetwork(ctx, tc.attach.Pod)
			err := r.ports.Attach(ctx, tc.attach)
			if tc.want == "" {
				if _, ok := r.state.Pods()["veth-c"]; !ok || netErr != nil || err != nil && !strings.Contains(err.Error(), "NetworkPolicy") {
					t.Fatalf("the pod's own record was refused: PodNetwork %v, Attach %v", netErr, err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Attach = %v, want a refusal saying %q", err, tc.want)
			}
			if tc.attach.IPs[0].Address == "10.244.1.10/24" && netErr == nil {
				t.Errorf("PodNetwork handed out a's address for pod c")
			}
			if _, ok := r.state.Pods()["veth-c"]; ok {
				t.Errorf("pod c is in the node's state: %+v", r.state.Pods()["veth-c"])
			}
		})
	}
}
