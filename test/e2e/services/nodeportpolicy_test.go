package services_test

import (
	"context"
	"fmt"
	"net/netip"
	"testing"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/kovs-net/kovs/go-controller/pkg/controller/ipam"
	"github.com/kovs-net/kovs/go-controller/pkg/sandbox/responder"
	"github.com/kovs-net/kovs/test/e2e/framework"
)

// testNodePortMeetsNetworkPolicy: what NetworkPolicy sees of NodePort traffic (issue 29;
// docs/services.md, "NodePort traffic and NetworkPolicy"). One backend on node1 is
// isolated by a policy whose only ingress peer is an ipBlock of the external host's
// address. Through an externalTrafficPolicy Local NodePort the backend sees each
// client's own address: the external host is answered, node2's host is refused, and the
// refusal is counted by the backend's IngressPolicy deny on node1. Through an
// externalTrafficPolicy Cluster NodePort the policy sees the node that took the
// connection, as with kube-proxy: through node1 the backend's own node (node1's gateway
// address, let through like all of the node's own traffic), so node2's host, which the
// Local NodePort refused, is answered; through node2 node2's gateway address, which the
// ipBlock does not hold, so even the external host is refused.
func (c *svcCluster) testNodePortMeetsNetworkPolicy(t *testing.T) {
	ns := c.namespace(t, "nppol")
	labels := map[string]string{"app": "nppol"}
	pods := c.createPods(t, framework.PodSpec{Namespace: ns, Name: "nppol-1", Node: "node1", Labels: labels,
		Ports: []corev1.ContainerPort{{ContainerPort: 8080, Protocol: corev1.ProtocolTCP}}})
	backend := key(pods[0])
	nodePortOf := func(name string, etp corev1.ServiceExternalTrafficPolicy) (netip.Addr, string) {
		svc := c.service(t, ns, name, labels, []corev1.ServicePort{svcPort("http", 80, intstr.FromInt32(8080), corev1.ProtocolTCP)},
			func(s *corev1.Service) {
				s.Spec.Type = corev1.ServiceTypeNodePort
				s.Spec.ExternalTrafficPolicy = etp
			})
		return framework.ClusterIPs(svc)[0], port(nodePort(t, svc, "http"), corev1.ProtocolTCP)
	}
	like, local := nodePortOf("local", corev1.ServiceExternalTrafficPolicyLocal)
	_, cluster := nodePortOf("cluster", corev1.ServiceExternalTrafficPolicyCluster)
	c.s.WaitEndpoints(t, ns, "local", podNames(pods), programTimeout)
	c.s.WaitEndpoints(t, ns, "cluster", podNames(pods), programTimeout)
	node1, node2 := c.nodeIP(t, "node1", like), c.nodeIP(t, "node2", like)
	ext, host2 := c.s.ExternalClient(t), c.s.NodeClient(t, "node2")
	gw1, gw2 := c.gatewayIP(t, "node1", like), c.gatewayIP(t, "node2", like)

	// answeredFrom: the backend answers the probe and saw src as its source; before the
	// policy the probe is repeated until the NodePort is programmed, after it one probe
	// must do.
	policy := false
	answeredFrom := func(from framework.Client, dst netip.Addr, p string, src netip.Addr, what string) {
		t.Helper()
		var r responder.Result
		if policy {
			r = c.s.ProbeFrom(from, dst, p, probeTimeout)
		} else {
			r = c.waitAnswered(t, from, dst, p, what)
		}
		switch {
		case !r.Connected || r.Reply == nil:
			t.Errorf("%s: %s from %s: %s", what, target(dst, p), from.Name, framework.Describe(r))
		case r.Reply.Identity != backend || r.Reply.Peer.Addr() != src:
			t.Errorf("%s: %s from %s answered by %s, which saw source %s; want %s seeing %s",
				what, target(dst, p), from.Name, r.Reply.Identity, r.Reply.Peer.Addr(), backend, src)
		}
	}
	// Before the policy, the paths the policy will refuse are open.
	answeredFrom(host2, node1, local, addrOf(host2, like), "Local NodePort before the policy")
	answeredFrom(ext, node2, cluster, gw2, "Cluster NodePort through node2 before the policy")

	np := &networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "external-only"},
		Spec: networkingv1.NetworkPolicySpec{
			PodSelector: metav1.LabelSelector{MatchLabels: labels},
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress},
			Ingress: []networkingv1.NetworkPolicyIngressRule{{From: []networkingv1.NetworkPolicyPeer{{
				IPBlock: &networkingv1.IPBlock{CIDR: netip.PrefixFrom(addrOf(ext, like), like.BitLen()).String()}}}}},
		}}
	if _, err := c.s.Client.NetworkingV1().NetworkPolicies(ns).Create(context.Background(), np, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create NetworkPolicy: %v", err)
	}
	policy = true
	deny := c.s.PodDenyPackets("node1", ns, pods[0].Name)
	// The deny flow and the ipBlock's allow come in one bundle: once the deny is there, so
	// is the rule.
	framework.Eventually(t, programTimeout, "node1 to isolate "+backend, func() error {
		_, err := deny()
		return err
	})

	// refused: the probe gets no answer and the backend's deny flow counted it.
	refused := func(from framework.Client, dst netip.Addr, p, what string) {
		t.Helper()
		r, denied, replaced, why := framework.ProbeDenied(deny, func() responder.Result { return c.s.ProbeFrom(from, dst, p, probeTimeout) })
		switch {
		case r.Connected || !r.TimedOut:
			t.Errorf("%s: %s from %s was not refused: %s", what, target(dst, p), from.Name, framework.Describe(r))
		case replaced:
			t.Errorf("%s: %s from %s: node1 replaced the deny flow during the probe, long after it isolated the pod", what, target(dst, p), from.Name)
		case !denied:
			t.Errorf("%s: %s from %s got no answer, but not on evidence: %s", what, target(dst, p), from.Name, why)
		}
	}
	for range 3 {
		answeredFrom(ext, node1, local, addrOf(ext, like), "Local NodePort from the address the ipBlock allows")
		refused(host2, node1, local, "Local NodePort from node2's host, which the ipBlock does not allow")
		answeredFrom(host2, node1, cluster, gw1, "Cluster NodePort through the backend's own node (the node's own traffic)")
		refused(ext, node2, cluster, "Cluster NodePort through node2 (node2's gateway address, which the ipBlock does not hold)")
	}
}

// gatewayIP is node's gateway address of like's family: the first address of its pod
// block (kovs.io/node-subnets), which kovs-gw0 holds and NodePort traffic of
// externalTrafficPolicy Cluster is masqueraded to.
func (c *svcCluster) gatewayIP(t *testing.T, node string, like netip.Addr) netip.Addr {
	t.Helper()
	n, err := c.s.Client.CoreV1().Nodes().Get(context.Background(), node, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ann, err := ipam.ParseNodeSubnetsAnnotation(n.Annotations[ipam.NodeSubnetsAnnotationKey])
	if err != nil {
		t.Fatalf("node %s: %v", node, err)
	}
	for _, b := range ann.Blocks() {
		if b.Addr().Is4() == like.Is4() {
			return ipam.BlockGateway(b)
		}
	}
	t.Fatalf("node %s has no pod block of %s's family: %s", node, like, fmt.Sprint(ann.Blocks()))
	return netip.Addr{}
}
