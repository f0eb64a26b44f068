package controller

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
)

func TestLeaderLabelFollowsLeadership(t *testing.T) {
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "kovs-controller-1",
		Labels: map[string]string{"app": "kovs-controller", LeaderLabel: "true"}}}
	client := fake.NewSimpleClientset(pod)
	ref := OwnPod{Namespace: "kube-system", Name: "kovs-controller-1"}
	labels := func() map[string]string {
		p, err := client.CoreV1().Pods("kube-system").Get(context.Background(), ref.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return p.Labels
	}

	// A replica starting with a stale label (restarted in place) clears it first.
	unlabel(client, ref)
	if l := labels(); l[LeaderLabel] != "" || l["app"] != "kovs-controller" {
		t.Fatalf("after unlabel: %v", l)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	labelAsLeader(ctx, client, ref, 10*time.Millisecond)
	if l := labels(); l[LeaderLabel] != "true" || l["app"] != "kovs-controller" {
		t.Fatalf("after labelAsLeader: %v", l)
	}
	// Outside a pod there is nothing to label, and no error.
	if err := markLeader(ctx, client, OwnPod{}, true); err != nil {
		t.Fatal(err)
	}
}

func TestLabelAsLeaderRetriesUntilThePodExists(t *testing.T) {
	client := fake.NewSimpleClientset()
	ref := OwnPod{Namespace: "kube-system", Name: "late"}
	done := make(chan struct{})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	go func() { labelAsLeader(ctx, client, ref, 10*time.Millisecond); close(done) }()
	time.Sleep(50 * time.Millisecond)
	if _, err := client.CoreV1().Pods("kube-system").Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "late"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	<-done
	p, err := client.CoreV1().Pods("kube-system").Get(ctx, "late", metav1.GetOptions{})
	if err != nil || p.Labels[LeaderLabel] != "true" {
		t.Fatalf("pod %v, err %v: not labelled after it appeared", p.Labels, err)
	}
}
