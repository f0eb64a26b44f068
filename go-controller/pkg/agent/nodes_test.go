package agent

import (
	"net/netip"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kovs-net/kovs/go-controller/pkg/controller/ipam"
)

// TestPeerIdentityIsTheControllersRecord: a peer's tunnel endpoint and host addresses come
// from kovs.io/node-addresses, not from the status.addresses its own kubelet writes: node3
// listing node2's address first or second changes nothing (issue 29). A Node without a
// record (a controller older than it) is taken at its status's word; an empty record
// leaves the peer without an endpoint.
func TestPeerIdentityIsTheControllersRecord(t *testing.T) {
	peer := func(record string, ips ...string) *corev1.Node {
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node3", Annotations: map[string]string{
			ipam.NodeSubnetsAnnotationKey: `{"ipv4":["10.244.2.0/24"]}`}}}
		if record != "" {
			n.Annotations[ipam.NodeAddressesAnnotationKey] = record
		}
		for _, ip := range ips {
			n.Status.Addresses = append(n.Status.Addresses, corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: ip})
		}
		return n
	}
	own := `{"addresses":["172.31.0.3"]}`
	for _, tc := range []struct {
		name     string
		node     *corev1.Node
		ok       bool
		endpoint string
		nodeIPs  []string
	}{
		{"node2's address first", peer(own, "172.31.0.2", "172.31.0.3"), true, "172.31.0.3", []string{"172.31.0.3"}},
		{"node2's address second", peer(own, "172.31.0.3", "172.31.0.2"), true, "172.31.0.3", []string{"172.31.0.3"}},
		{"no record yet", peer("", "172.31.0.3", "fd00::3"), true, "172.31.0.3", []string{"172.31.0.3", "fd00::3"}},
		{"every claimed address another's", peer(`{"addresses":[]}`, "172.31.0.2"), false, "", nil},
		{"an unreadable record", peer(`{"addresses":["x"]}`, "172.31.0.3"), false, "", nil},
	} {
		p, ok := tunnelPeer(tc.node, false)
		if ok != tc.ok {
			t.Errorf("%s: usable %v, want %v", tc.name, ok, tc.ok)
			continue
		}
		if !ok {
			continue
		}
		var want []netip.Addr
		for _, ip := range tc.nodeIPs {
			want = append(want, netip.MustParseAddr(ip))
		}
		if p.UnderlayIP.String() != tc.endpoint || !slices.Equal(p.NodeIPs, want) {
			t.Errorf("%s: endpoint %s, node addresses %v; want %s, %v", tc.name, p.UnderlayIP, p.NodeIPs, tc.endpoint, want)
		}
	}
}
