package services_test

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/kovs-net/kovs/test/e2e/framework"
)

// TestServiceSmoke is the quick end-to-end check of Service load balancing in br-int: on a
// two-node sandbox, three labelled pods behind a ClusterIP Service whose targetPort is a
// named port (kube-controller-manager writes the EndpointSlice), probed from a client pod
// on every node: new connections spread over all three backends, with the client's own
// address as their source; then a NetworkPolicy that admits only one client to the
// backends holds through the ClusterIP too (policy sees the translated connection).
func TestServiceSmoke(t *testing.T) {
	env := framework.Require(t)
	s := framework.Up(t, env, "--nodes", "2", "--ip-family", "ipv4")
	ns := "smoke"
	s.EnsureNamespace(t, ns, nil)
	ports := []corev1.ContainerPort{{Name: "http", ContainerPort: 8080, Protocol: corev1.ProtocolTCP}}
	var specs []framework.PodSpec
	for i, node := range []string{"node1", "node2", "node1"} {
		specs = append(specs, framework.PodSpec{Namespace: ns, Name: fmt.Sprintf("smoke-web-%d", i+1), Node: node,
			Labels: map[string]string{"app": "smoke-web"}, Ports: ports})
	}
	specs = append(specs,
		framework.PodSpec{Namespace: ns, Name: "smoke-client-1", Node: "node1", Labels: map[string]string{"role": "other"}},
		framework.PodSpec{Namespace: ns, Name: "smoke-client-2", Node: "node2", Labels: map[string]string{"role": "allowed"}})
	for _, sp := range specs {
		s.CreatePod(t, sp)
	}
	pods := map[string]*corev1.Pod{}
	for _, sp := range specs {
		pods[sp.Name] = s.WaitRunning(t, ns, sp.Name, 90*time.Second)
	}
	svc := s.CreateService(t, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "smoke-web"},
		Spec: corev1.ServiceSpec{Selector: map[string]string{"app": "smoke-web"}, Ports: []corev1.ServicePort{
			{Name: "web", Port: 80, TargetPort: intstr.FromString("http"), Protocol: corev1.ProtocolTCP}}},
	})
	vip := framework.ClusterIPs(svc)[0]
	backends := []string{ns + "/smoke-web-1", ns + "/smoke-web-2", ns + "/smoke-web-3"}
	s.WaitEndpoints(t, ns, "smoke-web", []string{"smoke-web-1", "smoke-web-2", "smoke-web-3"}, 60*time.Second)

	clients := []*corev1.Pod{pods["smoke-client-1"], pods["smoke-client-2"]}
	for _, c := range clients {
		from := s.PodClient(c)
		framework.Eventually(t, 30*time.Second, "ClusterIP "+vip.String()+" answers "+from.Name, func() error {
			if r := s.ProbeFrom(from, vip, "80/tcp", 2*time.Second); !r.Connected {
				return fmt.Errorf("%s", framework.Describe(r))
			}
			return nil
		})
		a := s.Spread(from, vip, "80/tcp", 45, 2*time.Second)
		if got := a.Identities(); !slices.Equal(got, backends) || a.Unanswered() > 0 {
			t.Errorf("from %s (%s): 45 connections to %s:80 answered by %s, want all of %v", from.Name, c.Spec.NodeName, vip, a, backends)
		}
		for _, r := range a.Results {
			if r.Reply != nil && r.Reply.Peer.Addr() != from.Addrs[0] {
				t.Errorf("from %s: backend %s saw source %s, want the client's own address", from.Name, r.Reply.Identity, r.Reply.Peer)
				break
			}
			if r.Reply != nil && r.Reply.Port.Number != 8080 {
				t.Errorf("from %s: answered on port %s, want the named targetPort http (8080)", from.Name, r.Reply.Port)
				break
			}
		}
	}

	// Only role=allowed pods may reach the backends, whatever address they dial.
	_, err := s.Client.NetworkingV1().NetworkPolicies(ns).Create(context.Background(), &networkingv1.NetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "smoke-allow-one"},
		Spec: networkingv1.NetworkPolicySpec{
			PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{"app": "smoke-web"}},
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress},
			Ingress: []networkingv1.NetworkPolicyIngressRule{{From: []networkingv1.NetworkPolicyPeer{{
				PodSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"role": "allowed"}}}}}},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create NetworkPolicy: %v", err)
	}
	denied, allowed := s.PodClient(pods["smoke-client-1"]), s.PodClient(pods["smoke-client-2"])
	framework.Eventually(t, 30*time.Second, "the policy to deny "+denied.Name+" through the ClusterIP", func() error {
		if r := s.ProbeFrom(denied, vip, "80/tcp", time.Second); r.Connected {
			return fmt.Errorf("still answered: %s", framework.Describe(r))
		}
		return nil
	})
	a := s.Spread(denied, vip, "80/tcp", 12, time.Second)
	if a.Unanswered() != 12 {
		t.Errorf("denied client %s through the ClusterIP: %s, want no answer at all", denied.Name, a)
	}
	for _, b := range []string{"smoke-web-1", "smoke-web-2", "smoke-web-3"} {
		direct := podAddr(pods[b], vip)
		if r := s.ProbeFrom(denied, direct, "8080/tcp", time.Second); r.Connected {
			t.Errorf("denied client reaches %s directly: the policy is not enforced at all", b)
		}
	}
	a = s.Spread(allowed, vip, "80/tcp", 30, 2*time.Second)
	if got := a.Identities(); !slices.Equal(got, backends) || a.Unanswered() > 0 {
		t.Errorf("allowed client %s through the ClusterIP: %s, want all of %v", allowed.Name, a, backends)
	}
}

// podAddr is the pod's address of like's family.
func podAddr(p *corev1.Pod, like netip.Addr) netip.Addr {
	for _, a := range framework.PodIPs(p) {
		if a.Is4() == like.Is4() {
			return a
		}
	}
	return netip.Addr{}
}
