package realization

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"

	"github.com/kovs-net/kovs/go-controller/pkg/controller/cachetrim"
	"github.com/kovs-net/kovs/go-controller/pkg/growth"
)

// BenchmarkPodEventPolicyGrowth grows the policies of a namespace with its pods: one
// namespace of n pods on 10 nodes and n policies, one per pod (as in Antrea's perf test's
// shape of a policy per pod), over the controller's informers. The work relabels every
// pod 40 times through the controller's pod handler, which enqueues the policies that
// select the pod before and after: one each. (The ratios are of package growth: see
// docs/scale.md.)
func BenchmarkPodEventPolicyGrowth(b *testing.B) {
	const rounds = 40
	growth.Ratio2x(b, 250, func(n int) func() {
		objs := []runtime.Object{namespace("x")}
		var pods []*corev1.Pod
		for i := range n {
			p := pod(fmt.Sprint("pod-", i), fmt.Sprint("node", i%10), fmt.Sprint("pod=p", i))
			pods = append(pods, p)
			objs = append(objs, p, policyObj(fmt.Sprint("np-", i), fmt.Sprint("pod=p", i)))
		}
		client := fake.NewClientset(objs...)
		factory := cachetrim.NewSharedInformerFactory(client, 0)
		c, err := New(factory, client, record.NewFakeRecorder(1), Options{})
		if err != nil {
			b.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		factory.Start(ctx.Done())
		policies, podInformer := factory.Networking().V1().NetworkPolicies().Informer(), factory.Core().V1().Pods().Informer()
		if !cache.WaitForCacheSync(ctx.Done(), policies.HasSynced, podInformer.HasSynced) {
			b.Fatal("informers did not sync")
		}
		// Let the handlers take the initial list before the work.
		for policies.LastSyncResourceVersion() == "" || c.ctl.Len() < n {
			time.Sleep(time.Millisecond)
		}
		versions := make([][]*corev1.Pod, len(pods))
		for i, p := range pods {
			for r := range rounds {
				p = p.DeepCopy()
				p.Labels["rev"] = fmt.Sprint(r)
				versions[i] = append(versions[i], p)
			}
		}
		return func() {
			defer func() { cancel(); factory.Shutdown() }()
			for r := range rounds {
				for i, vs := range versions {
					old := pods[i]
					if r > 0 {
						old = vs[r-1]
					}
					c.podChanged(old, vs[r])
				}
			}
		}
	})
}
