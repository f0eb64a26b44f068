package clusterpolicy

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/network-policy-api/apis/v1beta1"
)

// TestRelevantUpdate: the feed compiles again for what Compile reads, not for status
// churn.
func TestRelevantUpdate(t *testing.T) {
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "x", Name: "a", UID: "u", Labels: map[string]string{"app": "a"}},
		Spec:   corev1.PodSpec{NodeName: "n1"},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIPs: []corev1.PodIP{{IP: "10.0.0.1"}}}}
	with := func(f func(p *corev1.Pod)) *corev1.Pod { p := pod.DeepCopy(); f(p); return p }
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}, Status: corev1.NodeStatus{Addresses: []corev1.NodeAddress{{Address: "192.168.0.1"}}}}
	cnp := &v1beta1.ClusterNetworkPolicy{ObjectMeta: metav1.ObjectMeta{Name: "p", Generation: 1}}
	for _, tc := range []struct {
		name    string
		old, nu any
		want    bool
	}{
		{"pod condition", pod, with(func(p *corev1.Pod) { p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady}} }), false},
		{"pod label", pod, with(func(p *corev1.Pod) { p.Labels = map[string]string{"app": "b"} }), true},
		{"pod address", pod, with(func(p *corev1.Pod) { p.Status.PodIPs = []corev1.PodIP{{IP: "10.0.0.2"}} }), true},
		{"pod finished", pod, with(func(p *corev1.Pod) { p.Status.Phase = corev1.PodSucceeded }), true},
		{"pod named port", pod, with(func(p *corev1.Pod) {
			p.Spec.Containers = []corev1.Container{{Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 80}}}}
		}), true},
		{"node heartbeat", node, func() *corev1.Node {
			n := node.DeepCopy()
			n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady}}
			return n
		}(), false},
		{"node address", node, func() *corev1.Node { n := node.DeepCopy(); n.Status.Addresses[0].Address = "192.168.0.9"; return n }(), true},
		{"policy status", cnp, func() *v1beta1.ClusterNetworkPolicy {
			p := cnp.DeepCopy()
			p.Status.Conditions = []metav1.Condition{{Type: ConditionProgrammed}}
			return p
		}(), false},
		{"policy spec", cnp, func() *v1beta1.ClusterNetworkPolicy { p := cnp.DeepCopy(); p.Generation = 2; return p }(), true},
	} {
		if got := relevantUpdate(tc.old, tc.nu); got != tc.want {
			t.Errorf("%s: relevant = %v, want %v", tc.name, got, tc.want)
		}
	}
}
