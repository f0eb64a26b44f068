// Package workload is the ClusterNetworkPolicy workload that the flow-count test and the
// controller's benchmarks share (docs/cluster-network-policy.md#costs): policies of both
// tiers over a cluster of tenants, as Kubernetes objects, so that each consumer reads
// them the way kovs does (clusterpolicy.PodOf, the informers).
//
// A cluster of size (pods, policies) has pods/20 namespaces in tenants of 5, pods/10
// nodes (node i's pods in the i-th /20 of 10.0.0.0/8, NodeBlock) and 10 pods per node:
// pod i is in namespace i mod namespaces and on node i/10. Policy i (60% Admin, then Baseline) selects tenant i's pods: the whole
// tenant's namespaces, or every fourth policy only its pods with one app label. Each has
// three ingress rules (Accept from its own tenant's namespaces; Pass from another
// tenant's pods of one app on TCP 443; Deny from every namespace) and three egress
// rules (Accept to two CIDRs on TCP 5432 and 6379; Accept to a third CIDR on the UDP
// range 30000-30100; Deny to another tenant's namespaces).
package workload

import (
	"fmt"
	"net/netip"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/network-policy-api/apis/v1beta1"
)

// Cluster is the workload's objects.
type Cluster struct {
	Namespaces []*corev1.Namespace
	Nodes      []*corev1.Node
	Pods       []*corev1.Pod
	Policies   []*v1beta1.ClusterNetworkPolicy
}

// Apps is how many app labels the pods of a namespace are spread over.
const Apps = 10

// NodeBlock is node i's pod block: the i-th /20 of 10.0.0.0/8.
func NodeBlock(i int) netip.Prefix {
	return netip.PrefixFrom(netip.AddrFrom4([4]byte{10, byte(i >> 4), byte(i&15) << 4, 0}), 20)
}

// NodeName is node i's name.
func NodeName(i int) string { return fmt.Sprintf("node-%d", i) }

// New builds the workload: pods (a multiple of 20, at least 20) and policies.
func New(pods, policies int) (*Cluster, error) {
	if pods < 20 || pods%20 != 0 || policies < 1 {
		return nil, fmt.Errorf("workload of %d pods and %d policies: want a positive multiple of 20 pods and at least one policy", pods, policies)
	}
	namespaces, nodes := pods/20, pods/10
	tenants := max(namespaces/5, 1)
	c := &Cluster{}
	for n := range namespaces {
		name := fmt.Sprintf("ns-%d", n)
		c.Namespaces = append(c.Namespaces, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name,
			UID:    types.UID("ns-uid-" + name),
			Labels: map[string]string{"tenant": fmt.Sprint(n % tenants), corev1.LabelMetadataName: name}}})
	}
	for k := range nodes {
		c.Nodes = append(c.Nodes, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: NodeName(k), UID: types.UID(fmt.Sprint("node-uid-", k)),
			Labels: map[string]string{"kubernetes.io/hostname": NodeName(k)}},
			Status: corev1.NodeStatus{Addresses: []corev1.NodeAddress{{Type: corev1.NodeInternalIP,
				Address: netip.AddrFrom4([4]byte{172, 31, byte(k >> 8), byte(k)}).String()}}}})
	}
	for i := range pods {
		node := i / 10
		ip := NodeBlock(node).Addr()
		for range i%10 + 2 { // .1 is the gateway
			ip = ip.Next()
		}
		ns := fmt.Sprintf("ns-%d", i%namespaces)
		name := fmt.Sprintf("pod-%d", i)
		c.Pods = append(c.Pods, &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID("pod-uid-" + name),
				Labels: map[string]string{"app": fmt.Sprint(i / namespaces % Apps)}},
			Spec: corev1.PodSpec{NodeName: NodeName(node), Containers: []corev1.Container{{Name: "app", Image: "app",
				Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 8080, Protocol: corev1.ProtocolTCP}}}}},
			Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: ip.String(), PodIPs: []corev1.PodIP{{IP: ip.String()}}},
		})
	}
	sel := func(k, v string) *metav1.LabelSelector {
		return &metav1.LabelSelector{MatchLabels: map[string]string{k: v}}
	}
	tcp := func(port int32) v1beta1.ClusterNetworkPolicyProtocol {
		return v1beta1.ClusterNetworkPolicyProtocol{TCP: &v1beta1.ClusterNetworkPolicyProtocolTCP{DestinationPort: &v1beta1.Port{Number: port}}}
	}
	udpRange := v1beta1.ClusterNetworkPolicyProtocol{UDP: &v1beta1.ClusterNetworkPolicyProtocolUDP{
		DestinationPort: &v1beta1.Port{Range: &v1beta1.PortRange{Start: 30000, End: 30100}}}}
	for i := range policies {
		tier := v1beta1.AdminTier
		if i >= policies*6/10 {
			tier = v1beta1.BaselineTier
		}
		t, other, app := fmt.Sprint(i%tenants), fmt.Sprint((i+1)%tenants), fmt.Sprint(i%Apps)
		subject := v1beta1.ClusterNetworkPolicySubject{Namespaces: sel("tenant", t)}
		if i%4 == 3 {
			subject = v1beta1.ClusterNetworkPolicySubject{Pods: &v1beta1.NamespacedPod{NamespaceSelector: *sel("tenant", t), PodSelector: *sel("app", app)}}
		}
		p := &v1beta1.ClusterNetworkPolicy{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("cnp-%d", i), UID: types.UID(fmt.Sprint("cnp-uid-", i)), Generation: 1},
			Spec: v1beta1.ClusterNetworkPolicySpec{Tier: tier, Priority: int32(i % 50), Subject: subject,
				Ingress: []v1beta1.ClusterNetworkPolicyIngressRule{
					{Name: "tenant", Action: v1beta1.ClusterNetworkPolicyRuleActionAccept,
						From: []v1beta1.ClusterNetworkPolicyIngressPeer{{Namespaces: sel("tenant", t)}}},
					{Name: "https-from-neighbour", Action: v1beta1.ClusterNetworkPolicyRuleActionPass,
						From: []v1beta1.ClusterNetworkPolicyIngressPeer{{Pods: &v1beta1.NamespacedPod{
							NamespaceSelector: *sel("tenant", other), PodSelector: *sel("app", app)}}},
						Protocols: []v1beta1.ClusterNetworkPolicyProtocol{tcp(443)}},
					{Name: "deny-all", Action: v1beta1.ClusterNetworkPolicyRuleActionDeny,
						From: []v1beta1.ClusterNetworkPolicyIngressPeer{{Namespaces: &metav1.LabelSelector{}}}},
				},
				Egress: []v1beta1.ClusterNetworkPolicyEgressRule{
					{Name: "databases", Action: v1beta1.ClusterNetworkPolicyRuleActionAccept,
						To:        []v1beta1.ClusterNetworkPolicyEgressPeer{{Networks: []v1beta1.CIDR{"192.168.0.0/16", "172.16.0.0/12"}}},
						Protocols: []v1beta1.ClusterNetworkPolicyProtocol{tcp(5432), tcp(6379)}},
					{Name: "media", Action: v1beta1.ClusterNetworkPolicyRuleActionAccept,
						To:        []v1beta1.ClusterNetworkPolicyEgressPeer{{Networks: []v1beta1.CIDR{"203.0.113.0/24"}}},
						Protocols: []v1beta1.ClusterNetworkPolicyProtocol{udpRange}},
					{Name: "not-the-neighbour", Action: v1beta1.ClusterNetworkPolicyRuleActionDeny,
						To: []v1beta1.ClusterNetworkPolicyEgressPeer{{Namespaces: sel("tenant", other)}}},
				},
			},
		}
		c.Policies = append(c.Policies, p)
	}
	return c, nil
}

// CoreObjects are the namespaces, nodes and pods, for a fake clientset.
func (c *Cluster) CoreObjects() []runtime.Object {
	var out []runtime.Object
	for _, o := range c.Namespaces {
		out = append(out, o)
	}
	for _, o := range c.Nodes {
		out = append(out, o)
	}
	for _, o := range c.Pods {
		out = append(out, o)
	}
	return out
}

// PolicyObjects are the ClusterNetworkPolicies, for a fake clientset.
func (c *Cluster) PolicyObjects() []runtime.Object {
	out := make([]runtime.Object, len(c.Policies))
	for i, p := range c.Policies {
		out[i] = p
	}
	return out
}
