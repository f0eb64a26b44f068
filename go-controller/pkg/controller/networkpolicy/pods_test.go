package networkpolicy

import (
	"context"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kovs-net/kovs/go-controller/pkg/policy"
)

// TestShareListsEveryEvaluatedPod: a node's share lists all its selectable pods, whether
// a policy selects them or not, with their UIDs; host-network and terminated pods are
// not listed, and a pod recreated under the same name changes UID in one delta.
func TestShareListsEveryEvaluatedPod(t *testing.T) {
	client, c := startCompiler(t, newWorld())
	share, deltas := watch(t, c, "node-2")
	want := []policy.PodKey{{Namespace: "x", Name: "b", UID: "uid-x-b"}, {Namespace: "y", Name: "b", UID: "uid-y-b"},
		{Namespace: "z", Name: "b", UID: "uid-z-b"}}
	if !slices.Equal(share.Pods, want) {
		t.Fatalf("snapshot pods = %v, want %v", share.Pods, want)
	}
	ctx := context.Background()
	host := podObj("x", "host", "node-2")
	host.Spec.HostNetwork = true
	plain := podObj("x", "plain", "node-2")
	for _, p := range []*corev1.Pod{host, plain} {
		if _, err := client.CoreV1().Pods("x").Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	converge(t, deltas, &share, scratch(t, client, "node-2"))
	if !share.HasPod(policy.PodKey{Namespace: "x", Name: "plain", UID: "uid-x-plain"}) || share.HasPod(policy.PodKey{Namespace: "x", Name: "host"}) {
		t.Errorf("pods = %v: want x/plain and not the host-network pod", share.Pods)
	}
	if err := client.CoreV1().Pods("x").Delete(ctx, "plain", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	plain.UID = "uid-x-plain-2"
	if _, err := client.CoreV1().Pods("x").Create(ctx, plain, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	converge(t, deltas, &share, scratch(t, client, "node-2"))
	if share.HasPod(policy.PodKey{Namespace: "x", Name: "plain", UID: "uid-x-plain"}) || !share.HasPod(policy.PodKey{Namespace: "x", Name: "plain", UID: "uid-x-plain-2"}) {
		t.Errorf("recreated pod: pods = %v", share.Pods)
	}
	plain.Status.Phase = corev1.PodSucceeded
	mustUpdatePod(t, client, plain)
	converge(t, deltas, &share, scratch(t, client, "node-2"))
	if share.HasPod(policy.PodKey{Namespace: "x", Name: "plain"}) {
		t.Errorf("terminated pod still listed: %v", share.Pods)
	}
}

// TestPodArrivesWithItsPolicy: the delta that first lists a new pod also carries the
// isolation and rules that select it, so an agent that waits for the pod to be listed
// never enforces less than the policy.
func TestPodArrivesWithItsPolicy(t *testing.T) {
	w := newWorld()
	w.policies = pols(policyObj("x", "np", sel("pod=a"), nil, in(from(podPeer(sel("pod=b")))), nil))
	client, c := startCompiler(t, w)
	share, deltas := watch(t, c, "node-3")
	p := podObj("x", "a2", "node-3", "pod=a")
	if _, err := client.CoreV1().Pods("x").Create(context.Background(), p, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	key := policy.PodKey{Namespace: "x", Name: "a2", UID: "uid-x-a2"}
	timeout := time.After(10 * time.Second)
	for !share.HasPod(key) {
		select {
		case d := <-deltas:
			if err := d.Apply(&share); err != nil {
				t.Fatal(err)
			}
		case <-timeout:
			t.Fatal("the new pod never appeared in the share")
		}
	}
	if !share.Isolation.Isolated(policy.Ingress, "x", "a2") || len(share.Rules) != 1 {
		t.Errorf("the share that lists the new pod lacks its policy: %+v", share)
	}
}
