package clusterpolicy

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	corefake "k8s.io/client-go/kubernetes/fake"
	"sigs.k8s.io/network-policy-api/pkg/client/clientset/versioned/fake"

	"github.com/kovs-net/kovs/go-controller/pkg/policy"
)

// batchSink records the feed's batches.
type batchSink struct{ evaluated chan map[policy.PodKey]string }

func (s batchSink) SetClusterRules(_ map[string][]policy.ClusterRule, evaluated map[policy.PodKey]string) {
	s.evaluated <- evaluated
}

// Each batch tells the sink where it evaluated every pod it can select: the node of a
// scheduled pod, "" for one not scheduled yet; never a pod it cannot select (the
// compiler would then list a pod whose cluster rules were never compiled).
func TestFeedSaysWhereItEvaluatedEachPod(t *testing.T) {
	pod := func(name, node string, hostNetwork bool) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "x", Name: name, UID: types.UID("uid-" + name)},
			Spec: corev1.PodSpec{NodeName: node, HostNetwork: hostNetwork}, Status: corev1.PodStatus{Phase: corev1.PodRunning}}
	}
	core := corefake.NewSimpleClientset(&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "x"}},
		pod("scheduled", "node-1", false), pod("unscheduled", "", false), pod("host", "node-1", true))
	factory := informers.NewSharedInformerFactory(core, 0)
	sink := batchSink{evaluated: make(chan map[policy.PodKey]string, 10)}
	feed, err := NewFeed(fake.NewSimpleClientset(), factory, sink, 0)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	factory.Start(ctx.Done())
	go func() { _ = feed.Run(ctx) }()
	var got map[policy.PodKey]string
	select {
	case got = <-sink.evaluated:
	case <-time.After(30 * time.Second):
		t.Fatal("the feed sent no batch")
	}
	want := map[policy.PodKey]string{
		{Namespace: "x", Name: "scheduled", UID: "uid-scheduled"}:     "node-1",
		{Namespace: "x", Name: "unscheduled", UID: "uid-unscheduled"}: "",
	}
	if len(got) != len(want) {
		t.Fatalf("the feed's batch evaluated %v, want %v", got, want)
	}
	for k, node := range want {
		if n, ok := got[k]; !ok || n != node {
			t.Errorf("the feed's batch says %s/%s at %q (listed %v), want %q", k.Namespace, k.Name, n, ok, node)
		}
	}
}
