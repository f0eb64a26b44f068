package clusterpolicy

import (
	"net/netip"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/network-policy-api/apis/v1beta1"

	"github.com/kovs-net/kovs/go-controller/pkg/policy"
)

// The cluster of the tests: the conformance suite's houses, two pods each, with named
// ports that differ between the pods of a house.
func testCluster() *Cluster {
	c := &Cluster{Namespaces: map[string]map[string]string{}}
	houses := []string{"gryffindor", "slytherin", "hufflepuff", "ravenclaw"}
	for h, house := range houses {
		c.Namespaces[house] = map[string]string{"conformance-house": house, "kubernetes.io/metadata.name": house}
		for i := range 2 {
			ip := netip.AddrFrom4([4]byte{10, 0, byte(h), byte(10 + i)})
			ip6 := netip.AddrFrom16([16]byte{0xfd, 0, 15: byte(16*h + i + 1)})
			c.Pods = append(c.Pods, Pod{
				PodKey: policy.PodKey{Namespace: house, Name: house + "-" + string(rune('0'+i))},
				Labels: map[string]string{"app": house, "index": string(rune('0' + i))},
				IPs:    []netip.Addr{ip, ip6},
				Ports:  []NamedPort{{Name: "web", Protocol: policy.TCP, Number: 80 + int32(i)*8000}, {Name: "dns", Protocol: policy.UDP, Number: 53}},
				Node:   "node-" + string(rune('a'+i)),
			})
		}
	}
	c.Nodes = []Node{
		{Name: "node-a", Labels: map[string]string{"zone": "a"}, IPs: []netip.Addr{netip.MustParseAddr("192.168.0.1")}},
		{Name: "node-b", Labels: map[string]string{"zone": "b"}, IPs: []netip.Addr{netip.MustParseAddr("192.168.0.2")}},
	}
	return c
}

func (c *Cluster) pod(name string) *Pod {
	for i := range c.Pods {
		if c.Pods[i].Name == name {
			return &c.Pods[i]
		}
	}
	panic("no pod " + name)
}

// conn is a TCP (or proto) connection between two pods of the cluster, over IPv4.
func (c *Cluster) conn(src, dst string, proto policy.Protocol, port int32) Connection {
	s, d := c.pod(src), c.pod(dst)
	return Connection{Src: &s.PodKey, Dst: &d.PodKey, SrcIP: s.IPs[0], DstIP: d.IPs[0], Protocol: proto, Port: port}
}

func house(name string) *metav1.LabelSelector {
	return &metav1.LabelSelector{MatchLabels: map[string]string{"conformance-house": name}}
}

func cnp(name string, tier v1beta1.Tier, priority int32, subject string) *v1beta1.ClusterNetworkPolicy {
	return &v1beta1.ClusterNetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: v1beta1.ClusterNetworkPolicySpec{Tier: tier, Priority: priority,
			Subject: v1beta1.ClusterNetworkPolicySubject{Namespaces: house(subject)}},
	}
}

func tcp(port int32) v1beta1.ClusterNetworkPolicyProtocol {
	return v1beta1.ClusterNetworkPolicyProtocol{TCP: &v1beta1.ClusterNetworkPolicyProtocolTCP{DestinationPort: &v1beta1.Port{Number: port}}}
}

func ingress(action v1beta1.ClusterNetworkPolicyRuleAction, from string, protos ...v1beta1.ClusterNetworkPolicyProtocol) v1beta1.ClusterNetworkPolicyIngressRule {
	return v1beta1.ClusterNetworkPolicyIngressRule{Action: action, From: []v1beta1.ClusterNetworkPolicyIngressPeer{{Namespaces: house(from)}}, Protocols: protos}
}

func egress(action v1beta1.ClusterNetworkPolicyRuleAction, to string, protos ...v1beta1.ClusterNetworkPolicyProtocol) v1beta1.ClusterNetworkPolicyEgressRule {
	return v1beta1.ClusterNetworkPolicyEgressRule{Action: action, To: []v1beta1.ClusterNetworkPolicyEgressPeer{{Namespaces: house(to)}}, Protocols: protos}
}

// fakeNetworkPolicy is a NetworkPolicy tier: the isolated pods per direction, and the
// remote namespaces each isolated pod admits (on every port).
type fakeNetworkPolicy struct {
	isolated map[policy.Direction]map[string]bool
	allowed  map[policy.Direction]map[string][]netip.Prefix
}

func (f fakeNetworkPolicy) Isolated(dir policy.Direction, pod policy.PodKey) bool {
	return f.isolated[dir][pod.Name]
}

func (f fakeNetworkPolicy) Allows(dir policy.Direction, pod policy.PodKey, remote netip.Addr, _ policy.Protocol, _ int32) bool {
	return containsAddr(f.allowed[dir][pod.Name], remote)
}

const (
	accept = v1beta1.ClusterNetworkPolicyRuleActionAccept
	deny   = v1beta1.ClusterNetworkPolicyRuleActionDeny
	pass   = v1beta1.ClusterNetworkPolicyRuleActionPass
	admin  = v1beta1.AdminTier
	base   = v1beta1.BaselineTier
)
