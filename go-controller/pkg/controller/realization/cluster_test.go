package realization

import (
	"slices"
	"testing"

	"github.com/kovs-net/kovs/go-controller/pkg/policy"
)

// TestClusterRealizationFollowsReports: a ClusterNetworkPolicy with rules in a node's
// share is realized there once the agent reports the generation at which the node's
// cluster rules last changed, and every change and report concerning it is told.
func TestClusterRealizationFollowsReports(t *testing.T) {
	tr, _ := newTestTracker()
	var told []string
	tr.OnClusterChange(func(names []string) { told = append(told, names...) })
	rule := policy.ClusterRule{ID: "p/ingress/0", Policy: "p", Tier: policy.TierAdmin, Direction: policy.Ingress,
		Action: policy.ClusterDeny, Subjects: []policy.PodKey{podA}, AnyPeer: true}
	share := webShare(10)
	share.ClusterRules = []policy.ClusterRule{rule}
	if err := tr.snapshot("node1", share); err != nil {
		t.Fatal(err)
	}
	if r, c := tr.ClusterRealization("p"); r != 0 || c != 1 || !slices.Contains(told, "p") {
		t.Fatalf("after the snapshot: %d/%d, told %v; want 0/1, told p", r, c, told)
	}
	if r, c := tr.ClusterRealization("q"); r != 0 || c != 0 {
		t.Errorf("a policy with no rules in any share: %d/%d", r, c)
	}
	told = nil
	tr.Realized("node1", 10)
	if r, c := tr.ClusterRealization("p"); r != 1 || c != 1 || !slices.Equal(told, []string{"p"}) {
		t.Fatalf("after the report: %d/%d, told %v; want 1/1, told p", r, c, told)
	}
	// A delta that changes nothing of the cluster rules keeps p realized.
	if err := tr.delta("node1", policy.Delta{Node: "node1", FromGeneration: 10, Generation: 11, AddedPods: []policy.PodKey{podB}}); err != nil {
		t.Fatal(err)
	}
	if r, _ := tr.ClusterRealization("p"); r != 1 {
		t.Error("a delta without cluster rules made p unrealized")
	}
	// p's rule changes at 12: not realized until the node reports 12.
	rule.Action = policy.ClusterAccept
	told = nil
	if err := tr.delta("node1", policy.Delta{Node: "node1", FromGeneration: 11, Generation: 12, ClusterRules: &[]policy.ClusterRule{rule}}); err != nil {
		t.Fatal(err)
	}
	if r, c := tr.ClusterRealization("p"); r != 0 || c != 1 || !slices.Equal(told, []string{"p"}) {
		t.Fatalf("after p changed: %d/%d, told %v; want 0/1, told p", r, c, told)
	}
	tr.Realized("node1", 11)
	if r, _ := tr.ClusterRealization("p"); r != 0 {
		t.Error("realized at a generation older than its change")
	}
	tr.Realized("node1", 12)
	if r, _ := tr.ClusterRealization("p"); r != 1 {
		t.Error("not realized once the node reported its change")
	}
	// The rule leaves the node: p concerns no node, and is told.
	told = nil
	if err := tr.delta("node1", policy.Delta{Node: "node1", FromGeneration: 12, Generation: 13, ClusterRules: &[]policy.ClusterRule{}}); err != nil {
		t.Fatal(err)
	}
	if r, c := tr.ClusterRealization("p"); r != 0 || c != 0 || !slices.Equal(told, []string{"p"}) {
		t.Fatalf("after p left the node: %d/%d, told %v; want 0/0, told p", r, c, told)
	}
}
