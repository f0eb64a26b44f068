package refmodel

import (
	"errors"
	"testing"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/kovs-net/kovs/test/e2e/netpol/policymodel"
)

func pod(ns, name, node, ip string, hostNetwork bool) corev1.Pod {
	return corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{"pod": name}},
		Spec: corev1.PodSpec{NodeName: node, HostNetwork: hostNetwork, Containers: []corev1.Container{{Name: "c",
			Ports: []corev1.ContainerPort{{Name: "serve-81-tcp", ContainerPort: 81}}}}},
		Status: corev1.PodStatus{PodIPs: []corev1.PodIP{{IP: ip}}}}
}

// TestReferenceVerdicts checks that the verdicts come from the reference's evaluator:
// issue 33's rule (a named port through ipBlocks), an except that removes the
// destination, a default deny written as an empty list, and the cells it cannot judge.
func TestReferenceVerdicts(t *testing.T) {
	named := intstr.FromString("serve-81-tcp")
	egress := func(except string) networkingv1.NetworkPolicy {
		return networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: "z", Name: "np"},
			Spec: networkingv1.NetworkPolicySpec{PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{"pod": "a"}},
				PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeEgress},
				Egress: []networkingv1.NetworkPolicyEgressRule{{Ports: []networkingv1.NetworkPolicyPort{{Port: &named}},
					To: []networkingv1.NetworkPolicyPeer{{IPBlock: &networkingv1.IPBlock{CIDR: "0.0.0.0/0", Except: []string{except}}}}}}}}
	}
	denyAll := networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: "x", Name: "deny"},
		Spec: networkingv1.NetworkPolicySpec{PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress},
			Ingress: []networkingv1.NetworkPolicyIngressRule{}}}
	cluster := func(pols ...networkingv1.NetworkPolicy) *policymodel.Cluster {
		return &policymodel.Cluster{
			Namespaces: []corev1.Namespace{{ObjectMeta: metav1.ObjectMeta{Name: "x"}}, {ObjectMeta: metav1.ObjectMeta{Name: "z"}}},
			Pods: []corev1.Pod{pod("z", "a", "node1", "10.244.0.10", false), pod("x", "a", "node2", "10.244.1.10", false),
				pod("x", "h", "node2", "172.30.0.2", true)},
			Policies: pols,
		}
	}
	tcp := func(from, to string, port int32) policymodel.Connection {
		return policymodel.Connection{From: from, To: to, Protocol: corev1.ProtocolTCP, Port: port}
	}
	for _, tc := range []struct {
		name    string
		cluster *policymodel.Cluster
		conn    policymodel.Connection
		want    bool
	}{
		{"named port through an ipBlock", cluster(egress("10.244.9.9/32")), tcp("z/a", "x/a", 81), true},
		{"the port's number matters", cluster(egress("10.244.9.9/32")), tcp("z/a", "x/a", 80), false},
		{"except removes the destination", cluster(egress("10.244.1.10/32")), tcp("z/a", "x/a", 81), false},
		{"a node's address has no named port", cluster(egress("10.244.9.9/32")), tcp("z/a", "x/h", 81), false},
		{"ingress: [] is stored as no rules: deny", cluster(denyAll), tcp("z/a", "x/a", 80), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, err := New()
			if err != nil {
				t.Fatal(err)
			}
			if err := r.Set(tc.cluster); err != nil {
				t.Fatal(err)
			}
			got, err := r.Allowed(tc.conn)
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.want {
				t.Errorf("%s: allowed = %v, want %v", tc.conn, got, tc.want)
			}
		})
	}
	r, err := New()
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Set(cluster(denyAll)); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Allowed(tcp("x/h", "x/a", 80)); !errors.Is(err, ErrNodeTraffic) {
		t.Errorf("a node to its own pod: err = %v, want ErrNodeTraffic", err)
	}
}
