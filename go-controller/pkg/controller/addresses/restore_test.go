package addresses

import (
	"net/netip"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	corelisters "k8s.io/client-go/listers/core/v1"

	"github.com/kovs-net/kovs/go-controller/pkg/controller/ipam"
)

// listedPods is a PodLister that lists its pods in the order given: the order Restore
// must not depend on.
type listedPods struct {
	corelisters.PodLister
	pods []*corev1.Pod
}

func (l listedPods) List(labels.Selector) ([]*corev1.Pod, error) { return l.pods, nil }

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

// recordedPod is a pod on node a whose record claims ip (for recordUID: "" writes no UID).
func recordedPod(t *testing.T, name, uid, recordUID, ip string, running bool) *corev1.Pod {
	network, err := ipam.NewPodNetwork([]ipam.PodAddress{{Address: netip.PrefixFrom(netip.MustParseAddr(ip), 24),
		Gateway: netip.MustParseAddr("10.244.1.1")}})
	if err != nil {
		t.Fatal(err)
	}
	network.UID = recordUID
	v, err := network.Annotation()
	if err != nil {
		t.Fatal(err)
	}
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "x", Name: name, UID: types.UID(uid),
		Annotations: map[string]string{ipam.PodNetworkAnnotationKey: v}}, Spec: corev1.PodSpec{NodeName: "a"}}
	if running {
		p.Status = corev1.PodStatus{Phase: corev1.PodRunning, PodIPs: []corev1.PodIP{{IP: ip}}}
	}
	return p
}

// TestRestoreKeepsTheAddressWithThePodRunningWithIt: two pods claim one address after a
// restart. The one the API shows running with it keeps it, listed first or last; a
// record that names another pod's UID (a copy) is never restored, even listed first and
// running (issue 14).
func TestRestoreKeepsTheAddressWithThePodRunningWithIt(t *testing.T) {
	const ip = "10.244.1.7"
	cases := []struct {
		name   string
		pods   func() []*corev1.Pod
		holder string
	}{
		{"the running pod listed last", func() []*corev1.Pod {
			return []*corev1.Pod{recordedPod(t, "aaa-pending", "u1", "", ip, false), recordedPod(t, "zzz-running", "u2", "", ip, true)}
		}, "x/zzz-running"},
		{"the running pod listed first", func() []*corev1.Pod {
			return []*corev1.Pod{recordedPod(t, "zzz-running", "u2", "", ip, true), recordedPod(t, "aaa-pending", "u1", "", ip, false)}
		}, "x/zzz-running"},
		{"a running copy listed first", func() []*corev1.Pod {
			return []*corev1.Pod{recordedPod(t, "aaa-copy", "u1", "u2", ip, true), recordedPod(t, "zzz-owner", "u2", "u2", ip, false)}
		}, "x/zzz-owner"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			a, err := NewAllocator(Config{ClusterCIDRs: []ipam.ClusterCIDR{mustCIDR(t, "10.244.0.0/16", 24)}})
			if err != nil {
				t.Fatal(err)
			}
			nodes := listedNodes{nodes: []*corev1.Node{recordedNode(t, "a", "10.244.1.0/24")}}
			if err := a.Restore(nodes, listedPods{pods: tc.pods()}); err != nil {
				t.Fatal(err)
			}
			pools, _ := a.nodePools("a")
			holder := ""
			for key := range a.owners {
				for _, got := range pools.Lookup(podIPAMKey(key, a.owners[key].uid)) {
					if got.Address.Addr() == netip.MustParseAddr(ip) {
						holder = key
					}
				}
			}
			if holder != tc.holder {
				t.Errorf("%s is restored to %q, want %s", ip, holder, tc.holder)
			}
		})
	}
}

func mustCIDR(t *testing.T, cidr string, block int) ipam.ClusterCIDR {
	c, err := ipam.ParseClusterCIDR(cidr, block)
	if err != nil {
		t.Fatal(err)
	}
	return c
}
