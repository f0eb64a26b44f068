package networkpolicy

import (
	"slices"
	"testing"

	"github.com/kovs-net/kovs/go-controller/pkg/policy"
)

// A node's share lists a new pod (the agent opens it) only once the cluster feed has
// evaluated it on that node, in the version that carries the cluster rules selecting it;
// without a feed it lists the pod at once, as before there were cluster rules.
func TestSharesListPodsOnlyOnceTheClusterFeedEvaluatedThem(t *testing.T) {
	w := newWorld()
	m := w.model()
	evaluated := map[policy.PodKey]string{}
	for _, p := range w.pods {
		evaluated[policy.PodKey{Namespace: p.Namespace, Name: p.Name, UID: string(p.UID)}] = p.Spec.NodeName
	}
	m.setClusterRules(policy.ClusterBatch{Rules: map[string][]policy.ClusterRule{}, HasRules: true, Evaluated: evaluated})
	m.commit()
	s, share := m.subscribe("node-1")
	share = share.Clone()
	if !slices.ContainsFunc(share.Pods, func(k policy.PodKey) bool { return k.Namespace == "x" && k.Name == "a" }) {
		t.Fatalf("the feed evaluated x/a on node-1, yet node-1's share does not list it: %v", share.Pods)
	}
	step := func(what string) policy.Delta {
		t.Helper()
		m.commit()
		d, ok := m.delta(s)
		if !ok {
			return d
		}
		if err := d.Apply(&share); err != nil {
			t.Fatalf("%s: the delta does not apply: %v", what, err)
		}
		return d
	}
	listed := func(name string) bool {
		return slices.ContainsFunc(share.Pods, func(k policy.PodKey) bool { return k.Namespace == "x" && k.Name == name })
	}

	// A pod created since the feed's last batch: evaluated here, not by the feed.
	d := podObj("x", "d", "node-1", "pod=d")
	m.setPod(podKey(d), d)
	step("x/d created")
	if listed("d") {
		t.Fatal("node-1's share lists x/d before the cluster feed evaluated it: the agent would open it without its cluster rules")
	}
	// The feed's next batch: x/d with the Deny that selects it, listed in the same version.
	dKey := policy.PodKey{Namespace: "x", Name: "d", UID: string(d.UID)}
	deny := []policy.ClusterRule{{ID: "deny/ingress/0", Policy: "deny", Tier: policy.TierAdmin, Priority: 1,
		Direction: policy.Ingress, Action: policy.ClusterDeny, Subjects: []policy.PodKey{dKey}, AnyPeer: true}}
	m.setClusterRules(policy.ClusterBatch{Rules: map[string][]policy.ClusterRule{"node-1": deny}, HasRules: true,
		Evaluated: map[policy.PodKey]string{dKey: "node-1"}})
	delta := step("the feed evaluated x/d")
	if !listed("d") || delta.ClusterRules == nil || !policy.EqualClusterRules(*delta.ClusterRules, deny) {
		t.Fatalf("the feed's batch with x/d: listed %v, delta's cluster rules %+v, want x/d listed with %+v", listed("d"), delta.ClusterRules, deny)
	}

	// A pod the feed saw before it was scheduled: its rules went to no node, so being
	// seen is not enough; it waits until the feed saw it on node-1.
	e := podObj("x", "e", "", "pod=e")
	eKey := policy.PodKey{Namespace: "x", Name: "e", UID: string(e.UID)}
	m.setPod(podKey(e), e)
	m.setClusterRules(policy.ClusterBatch{Evaluated: map[policy.PodKey]string{eKey: ""}})
	step("x/e seen by the feed unscheduled")
	e = e.DeepCopy()
	e.Spec.NodeName = "node-1"
	m.setPod(podKey(e), e)
	step("x/e scheduled on node-1")
	if listed("e") {
		t.Fatal("node-1's share lists x/e, which the cluster feed only evaluated before it was scheduled there")
	}
	// Deleted before the feed saw it on node-1: nothing to remove from the share.
	m.setPod(podKey(e), nil)
	if delta := step("x/e deleted unlisted"); len(delta.RemovedPods) != 0 {
		t.Errorf("the deletion of x/e, never listed, removes pods %v", delta.RemovedPods)
	}
	// A listed pod stays listed through a feed batch that (racing with its deletion)
	// forgets it, and leaves the share when the compiler sees it deleted.
	m.setClusterRules(policy.ClusterBatch{Rules: map[string][]policy.ClusterRule{}, HasRules: true, Forgotten: map[policy.PodKey]bool{dKey: true}})
	step("a batch that forgets x/d")
	if !listed("d") {
		t.Fatal("a feed batch that forgets x/d unlisted it: the agent would close a running pod")
	}
	m.setPod(podKey(d), nil)
	if delta := step("x/d deleted"); !slices.Contains(delta.RemovedPods, dKey) {
		t.Errorf("the deletion of listed x/d removes %v from the share, want it", delta.RemovedPods)
	}
}

// Without a cluster feed (the API does not serve ClusterNetworkPolicy), a share lists a
// pod as soon as this compiler evaluated it.
func TestSharesListPodsAtOnceWithoutAClusterFeed(t *testing.T) {
	w := newWorld()
	m := w.model()
	m.commit()
	s, share := m.subscribe("node-1")
	share = share.Clone()
	d := podObj("x", "d", "node-1", "pod=d")
	m.setPod(podKey(d), d)
	m.commit()
	delta, _ := m.delta(s)
	if err := delta.Apply(&share); err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(share.Pods, func(k policy.PodKey) bool { return k.Name == "d" }) {
		t.Fatalf("without a cluster feed node-1's share does not list x/d: %v", share.Pods)
	}
}
