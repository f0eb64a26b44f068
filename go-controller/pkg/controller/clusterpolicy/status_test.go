package clusterpolicy

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/tools/record"
	"sigs.k8s.io/network-policy-api/apis/v1beta1"
	"sigs.k8s.io/network-policy-api/pkg/client/clientset/versioned/fake"
)

// The conditions and the Event of a policy kovs enforces differently, and of one it
// enforces as written (both say they are not programmed yet).
func TestStatusConditionsAndEvent(t *testing.T) {
	exact := cnp("exact", admin, 1, "gryffindor")
	exact.Spec.Ingress = []v1beta1.ClusterNetworkPolicyIngressRule{ingress(deny, "slytherin", tcp(80))}
	dns := cnp("dns", admin, 2, "gryffindor")
	dns.Generation = 3
	dns.Spec.Egress = []v1beta1.ClusterNetworkPolicyEgressRule{{Name: "names", Action: accept,
		To: []v1beta1.ClusterNetworkPolicyEgressPeer{{DomainNames: []v1beta1.DomainName{"kubernetes.io"}}}}}
	client := fake.NewSimpleClientset(exact, dns)
	recorder := record.NewFakeRecorder(10)
	nodes := &fakeRealizations{realized: 1, concerned: 2}
	s, err := NewStatus(client, recorder, nil, nodes, func(name string) (int64, bool) { return map[string]int64{"exact": 0, "dns": 3}[name], true })
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	conditions := func(name string) []metav1.Condition {
		var got []metav1.Condition
		err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
			p, err := client.PolicyV1beta1().ClusterNetworkPolicies().Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return false, err
			}
			got = p.Status.Conditions
			return meta.FindStatusCondition(got, ConditionSupported) != nil, nil
		})
		if err != nil {
			t.Fatalf("%s: no %s condition: %v", name, ConditionSupported, err)
		}
		return got
	}
	c := conditions("exact")
	if sup := meta.FindStatusCondition(c, ConditionSupported); sup.Status != metav1.ConditionTrue || sup.Reason != ReasonAsWritten {
		t.Errorf("exact: %+v", sup)
	}
	if prog := meta.FindStatusCondition(c, ConditionProgrammed); prog == nil || prog.Status != metav1.ConditionFalse ||
		prog.Reason != ReasonPending || prog.Message != "enforced on 1/2 nodes" {
		t.Errorf("exact: programmed %+v, want False/%s on 1/2 nodes", prog, ReasonPending)
	}
	// The second node reports: Programmed.
	nodes.set(2, 2)
	s.Enqueue([]string{"exact"})
	err = wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		p, err := client.PolicyV1beta1().ClusterNetworkPolicies().Get(ctx, "exact", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		prog := meta.FindStatusCondition(p.Status.Conditions, ConditionProgrammed)
		return prog != nil && prog.Status == metav1.ConditionTrue && prog.Reason == ReasonRealized && prog.Message == "enforced on 2/2 nodes", nil
	})
	if err != nil {
		t.Errorf("exact: not Programmed once enforced on 2/2 nodes: %v", err)
	}
	c = conditions("dns")
	sup := meta.FindStatusCondition(c, ConditionSupported)
	if sup.Status != metav1.ConditionFalse || sup.Reason != ReasonPartlyUnsupported || sup.ObservedGeneration != 3 ||
		!strings.Contains(sup.Message, "domainNames") || !strings.Contains(sup.Message, `("names")`) {
		t.Errorf("dns: %+v", sup)
	}
	select {
	case e := <-recorder.Events:
		if !strings.HasPrefix(e, "Warning "+ReasonPartlyUnsupported+" ") || !strings.Contains(e, "domainNames") {
			t.Errorf("event %q", e)
		}
	case <-time.After(30 * time.Second):
		t.Error("no Event for the policy kovs enforces differently")
	}
	if len(recorder.Events) != 0 {
		t.Errorf("more events than the one problem: %q", <-recorder.Events)
	}
	cancel()
	if err := <-done; err != nil {
		t.Error(err)
	}
}

type fakeRealizations struct {
	mu                  sync.Mutex
	realized, concerned int
}

func (f *fakeRealizations) set(realized, concerned int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.realized, f.concerned = realized, concerned
}

func (f *fakeRealizations) ClusterRealization(string) (int, int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.realized, f.concerned
}
