package harness

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The objects of the workload: bench shape (a) (../shared/bench-shapes.md) with bound
// pods. Every object carries labelWorkload so a run's objects are told from the system's.
const (
	labelWorkload = "kovs.io/scale"
	pauseImage    = "registry.k8s.io/pause:3.10"
)

func appLabels(app int) map[string]string {
	return map[string]string{fmt.Sprintf("app-%d", app): fmt.Sprintf("scale-%d", app)}
}

func namespaceObject(name string) *corev1.Namespace {
	return &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name,
		Labels: map[string]string{"app": name, labelWorkload: "true"}}}
}

// podObject is a pod already bound to its node (spec.nodeName), as bench-shapes.md's
// pods are: no scheduler in the way, one container, no ports, not host-network.
func podObject(ref podRef, p podPlace) *corev1.Pod {
	labels := appLabels(p.App)
	labels[labelWorkload] = "true"
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ref.Namespace, Name: ref.Name, Labels: labels},
		Spec: corev1.PodSpec{NodeName: p.Node, AutomountServiceAccountToken: new(bool),
			Containers: []corev1.Container{{Name: "pause", Image: pauseImage}}},
	}
}

// policyObject is np-1 or np-2 of shape (a): the pods of sel isolated both ways, ingress
// allowed from the same pods.
func policyObject(name string, sel selector) *networkingv1.NetworkPolicy {
	pods := metav1.LabelSelector{MatchLabels: appLabels(sel.App)}
	return &networkingv1.NetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{Namespace: sel.Namespace, Name: name, Labels: map[string]string{labelWorkload: "true"}},
		Spec: networkingv1.NetworkPolicySpec{
			PodSelector: pods,
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress, networkingv1.PolicyTypeEgress},
			Ingress: []networkingv1.NetworkPolicyIngressRule{{
				From: []networkingv1.NetworkPolicyPeer{{PodSelector: pods.DeepCopy()}}}},
		},
	}
}
