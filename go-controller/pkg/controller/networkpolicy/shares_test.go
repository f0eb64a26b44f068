package networkpolicy

import (
	"bytes"
	"fmt"
	"reflect"
	"testing"

	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/kovs-net/kovs/go-controller/pkg/policy"
)

// TestSnapshotOfManyRulesFollowsChanges covers the cached rules of a group with many
// rules (cloneRulesMin): every snapshot must equal the share a subscriber keeps from
// deltas after rules are added, removed and changed, and changing a clone of a snapshot must not change the
// next one. The rules of node-1 come from one group (shared map), then from two (clone).
func TestSnapshotOfManyRulesFollowsChanges(t *testing.T) {
	w := newWorld()
	m := w.model()
	set := func(np *networkingv1.NetworkPolicy) {
		m.setPolicy(types.NamespacedName{Namespace: np.Namespace, Name: np.Name}, np)
	}
	remove := func(name string) {
		m.setPolicy(types.NamespacedName{Namespace: "x", Name: name}, nil)
	}
	same := func(i int) *networkingv1.NetworkPolicy {
		return policyObj("x", fmt.Sprintf("np-%03d", i), sel("pod=a"), ingressOnly(),
			[]networkingv1.NetworkPolicyIngressRule{from(podPeer(sel("pod=b")))}, nil)
	}
	// The reference is a subscriber's share kept by deltas, which do not go through
	// snapshots.
	sub, share := m.subscribe("node-1")
	share = share.Clone()
	check := func(step string) {
		t.Helper()
		m.commit()
		if d, ok := m.delta(sub); ok {
			if err := d.Apply(&share); err != nil {
				t.Fatalf("%s: %v", step, err)
			}
		}
		want := shareJSON(t, share)
		got := m.snapshot(m.nodes["node-1"])
		if a := shareJSON(t, got); !bytes.Equal(a, want) {
			t.Fatalf("%s: snapshot\n%s\nwant (the subscriber's)\n%s", step, a, want)
		}
		got = got.Clone() // as a receiver that changes its share must
		for id := range got.Rules {
			delete(got.Rules, id)
		}
		got.Rules["junk"] = policy.Rule{ID: "junk"}
		if again := m.snapshot(m.nodes["node-1"]); !bytes.Equal(shareJSON(t, again), want) {
			t.Fatalf("%s: changing a snapshot changed the next one", step)
		}
	}
	for i := range 2 * cloneRulesMin {
		set(same(i))
	}
	check("added")
	if got, g := m.snapshot(m.nodes["node-1"]), m.policies[types.NamespacedName{Namespace: "x", Name: "np-000"}].appliedTo; !sameMap(got.Rules, g.ruleMap) {
		t.Fatalf("the node's rules are not the cached map of its group of %d rules: the test does not cover it", len(g.rules))
	}
	for i := range 10 {
		remove(fmt.Sprintf("np-%03d", 3*i))
	}
	check("removed")
	changed := same(1)
	changed.Spec.Ingress[0].From = []networkingv1.NetworkPolicyPeer{podPeer(sel("pod=c"))}
	remove("np-001")
	set(changed)
	set(policyObj("x", "other", sel("pod=a"), ingressOnly(), []networkingv1.NetworkPolicyIngressRule{from(podPeer(sel("pod=a")))}, nil))
	check("changed")
	set(policyObj("x", "on-c", sel("pod=c"), ingressOnly(), []networkingv1.NetworkPolicyIngressRule{from(podPeer(sel("pod=a")))}, nil))
	check("two groups")
	if got, g := m.snapshot(m.nodes["node-1"]), m.policies[types.NamespacedName{Namespace: "x", Name: "np-002"}].appliedTo; sameMap(got.Rules, g.ruleMap) {
		t.Fatal("a node with two groups shares the cached rules of one")
	}
	for i := range 2 * cloneRulesMin {
		remove(fmt.Sprintf("np-%03d", i))
	}
	check("back to few")
}

func sameMap(a, b map[string]policy.Rule) bool {
	return b != nil && reflect.ValueOf(a).UnsafePointer() == reflect.ValueOf(b).UnsafePointer()
}

// TestSubscribersOfANodeAgreeOnItsGeneration is the stuck realization of
// BenchmarkPolicyRealization: a node has two subscribers, its agent's stream and the
// realization tracker, and they take their deltas at different times. A policy changes
// node-1's share; the agent's subscriber takes it at once, the tracker's only after a
// second batch that changes node-2 alone. Both hold the same share, so they must be at the
// same generation: the tracker asks the agent for the generation at which it saw the
// change, and the agent gets nothing more for node-1.
func TestSubscribersOfANodeAgreeOnItsGeneration(t *testing.T) {
	w := newWorld()
	m := w.model()
	m.commit()
	agent, agentShare := m.subscribe("node-1")
	tracker, trackerShare := m.subscribe("node-1")
	agentShare, trackerShare = agentShare.Clone(), trackerShare.Clone()
	take := func(who string, s *subscriber, share *policy.NodeShare) {
		t.Helper()
		if d, ok := m.delta(s); ok {
			if err := d.Apply(share); err != nil {
				t.Fatalf("%s: %v", who, err)
			}
		}
	}
	set := func(np *networkingv1.NetworkPolicy) {
		m.setPolicy(types.NamespacedName{Namespace: np.Namespace, Name: np.Name}, np)
		m.commit()
	}
	// pod=a is on node-1, pod=b on node-2.
	set(policyObj("x", "on-node-1", sel("pod=a"), ingressOnly(), in(from(podPeer(sel("pod=c")))), nil))
	take("agent", agent, &agentShare)
	set(policyObj("x", "on-node-2", sel("pod=b"), ingressOnly(), in(from(podPeer(sel("pod=c")))), nil))
	take("agent", agent, &agentShare)
	take("tracker", tracker, &trackerShare)
	if !bytes.Equal(shareJSON(t, agentShare), shareJSON(t, trackerShare)) {
		t.Fatalf("the subscribers hold different shares:\nagent   %s\ntracker %s", shareJSON(t, agentShare), shareJSON(t, trackerShare))
	}
	if agentShare.Generation != trackerShare.Generation {
		t.Fatalf("same share of node-1 at two generations: the agent's subscriber is at %d, the tracker's at %d",
			agentShare.Generation, trackerShare.Generation)
	}
	if snap := m.snapshot(m.nodes["node-1"]); snap.Generation != agentShare.Generation {
		t.Fatalf("a new subscriber of node-1 would start at generation %d, the caught-up ones are at %d",
			snap.Generation, agentShare.Generation)
	}
}
