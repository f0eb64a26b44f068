package realization

import (
	"net/netip"
	"slices"
	"testing"

	"k8s.io/apimachinery/pkg/types"

	"github.com/kovs-net/kovs/go-controller/pkg/policy"
)

var (
	podA   = policy.PodKey{Namespace: "x", Name: "a", UID: "ua"}
	podB   = policy.PodKey{Namespace: "x", Name: "b", UID: "ub"}
	webKey = types.NamespacedName{Namespace: "x", Name: "web"}
)

// webShare is node1's share with policy x/web (one ingress rule from set "db") applied to
// pod a, at generation gen.
func webShare(gen uint64, dbAddrs ...string) policy.NodeShare {
	s := policy.NewNodeShare("node1")
	s.Generation = gen
	var prefixes []netip.Prefix
	for _, a := range dbAddrs {
		prefixes = append(prefixes, netip.MustParsePrefix(a))
	}
	s.AddressSets["db"] = policy.AddressSet{ID: "db", Addresses: prefixes}
	s.AppliedToSets["web"] = policy.AppliedToSet{ID: "web", Pods: []policy.AppliedPod{{PodKey: podA}}}
	s.Rules["x/web/ingress/0"] = policy.Rule{ID: "x/web/ingress/0", Policy: policy.PolicyRef{Namespace: "x", Name: "web", UID: "uw"},
		Direction: policy.Ingress, AppliedTo: "web", Peers: []string{"db"}, Action: policy.ActionAllow}
	s.Isolation.Ingress = []policy.PodKey{podA}
	return s
}

func webOnNode() onNode {
	return onNode{key: webKey, uid: "uw", pods: []policy.PodKey{podA}, isolates: [2]bool{true, false}, rules: []string{"x/web/ingress/0"}}
}

func newTestTracker() (*Tracker, *[]types.NamespacedName) {
	var told []types.NamespacedName
	return NewTracker(func(keys []types.NamespacedName, _ []policy.PodKey, _ string) { told = append(told, keys...) }), &told
}

func TestVerdictFollowsReports(t *testing.T) {
	tr, told := newTestTracker()
	if done, _ := tr.verdict("node1", webOnNode()); done {
		t.Fatal("realized on a node whose share is unknown")
	}
	if err := tr.snapshot("node1", webShare(10, "10.0.0.1/32")); err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(*told, webKey) {
		t.Errorf("the snapshot did not bring back the waiting policy: %v", *told)
	}
	if done, need := tr.verdict("node1", webOnNode()); done || need != 10 {
		t.Fatalf("before any report: %v, need %d; want false, 10", done, need)
	}
	*told = nil
	tr.Realized("node1", 9)
	if len(*told) != 0 {
		t.Errorf("a report below the need brought back %v", *told)
	}
	tr.Realized("node1", 10)
	if !slices.Equal(*told, []types.NamespacedName{webKey}) {
		t.Errorf("the report that satisfies the need brought back %v", *told)
	}
	if done, _ := tr.verdict("node1", webOnNode()); !done {
		t.Error("not realized after the node reported the generation it needs")
	}
}

func TestGenerationsOfTheParts(t *testing.T) {
	tr, told := newTestTracker()
	_ = tr.snapshot("node1", webShare(10, "10.0.0.1/32"))
	// An unrelated change leaves the need alone.
	_ = tr.delta("node1", policy.Delta{Node: "node1", FromGeneration: 10, Generation: 11,
		AddedAddressSets: []policy.AddressSet{{ID: "other"}}})
	if _, need := tr.verdict("node1", webOnNode()); need != 10 {
		t.Errorf("need %d after an unrelated change, want 10", need)
	}
	// A peer address change is one for the policy.
	*told = nil
	_ = tr.delta("node1", policy.Delta{Node: "node1", FromGeneration: 11, Generation: 12,
		UpdatedAddressSets: []policy.AddressSetPatch{{ID: "db", Added: []netip.Prefix{netip.MustParsePrefix("10.0.0.2/32")}}}})
	if !slices.Contains(*told, webKey) {
		t.Errorf("a change of the rule's peers did not concern x/web: %v", *told)
	}
	if _, need := tr.verdict("node1", webOnNode()); need != 12 {
		t.Errorf("need %d after the peers changed, want 12", need)
	}
	// A re-subscription's snapshot that differs only in the other set keeps the need.
	_ = tr.snapshot("node1", webShare(15, "10.0.0.1/32", "10.0.0.2/32"))
	if _, need := tr.verdict("node1", webOnNode()); need != 12 {
		t.Errorf("need %d after an equal snapshot, want 12", need)
	}
	// A pod of the policy isolated at 16.
	on := webOnNode()
	on.pods = append(on.pods, podB)
	if _, err := tr.record("node1").need(on); err == nil {
		t.Error("pod b is not isolated yet, but the policy counts as in the share")
	}
	iso := policy.Isolation{Ingress: []policy.PodKey{podA, podB}}
	_ = tr.delta("node1", policy.Delta{Node: "node1", FromGeneration: 15, Generation: 16, Isolation: &iso,
		UpdatedAppliedToSets: []policy.AppliedToSet{{ID: "web", Pods: []policy.AppliedPod{{PodKey: podA}, {PodKey: podB}}}}})
	if _, need := tr.verdict("node1", on); need != 16 {
		t.Errorf("need %d after pod b was isolated, want 16", need)
	}
	// Removing the rule is a change of the policy too.
	_ = tr.delta("node1", policy.Delta{Node: "node1", FromGeneration: 16, Generation: 17, RemovedRules: []string{"x/web/ingress/0"}})
	on.rules = nil
	if _, need := tr.verdict("node1", on); need != 17 {
		t.Errorf("need %d after the rule was removed, want 17", need)
	}
}

func TestRuleOfAnotherIncarnationDoesNotCount(t *testing.T) {
	tr, _ := newTestTracker()
	_ = tr.snapshot("node1", webShare(10))
	on := webOnNode()
	on.uid = "recreated"
	if _, err := tr.record("node1").need(on); err == nil {
		t.Error("the rule of the deleted policy x/web stands for the recreated one")
	}
}

// TestSetChangeTellsThePoliciesUsingTheSet checks the index of the rules that use each
// set, through rule updates (by delta and by snapshot) and removals: a changed set
// concerns exactly the policies whose rules reference it now.
func TestSetChangeTellsThePoliciesUsingTheSet(t *testing.T) {
	tr, told := newTestTracker()
	share := webShare(10, "10.0.0.1/32")
	share.AddressSets["cache"] = policy.AddressSet{ID: "cache"}
	if err := tr.snapshot("node1", share); err != nil {
		t.Fatal(err)
	}
	gen := uint64(10)
	patch := func(step, set string, want ...types.NamespacedName) {
		t.Helper()
		*told = nil
		d := policy.Delta{Node: "node1", FromGeneration: gen, Generation: gen + 1,
			UpdatedAddressSets: []policy.AddressSetPatch{{ID: set, Added: []netip.Prefix{netip.PrefixFrom(netip.AddrFrom4([4]byte{10, 1, 0, byte(gen)}), 32)}}}}
		gen++
		if err := tr.delta("node1", d); err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(*told, want) {
			t.Errorf("%s: a change of set %s told %v, want %v", step, set, *told, want)
		}
	}
	patch("at first", "db", webKey)
	patch("at first", "cache")
	rule := share.Rules["x/web/ingress/0"]
	rule.Peers = []string{"cache"}
	if err := tr.delta("node1", policy.Delta{Node: "node1", FromGeneration: gen, Generation: gen + 1, UpdatedRules: []policy.Rule{rule}}); err != nil {
		t.Fatal(err)
	}
	gen++
	patch("the rule's peer moved to cache by a delta", "db")
	patch("the rule's peer moved to cache by a delta", "cache", webKey)
	next := webShare(gen+1, "10.0.0.1/32")
	next.AddressSets["cache"] = tr.nodes["node1"].share.AddressSets["cache"]
	if err := tr.snapshot("node1", next); err != nil {
		t.Fatal(err)
	}
	gen++
	patch("the rule's peer back to db by a snapshot", "cache")
	patch("the rule's peer back to db by a snapshot", "db", webKey)
	if err := tr.delta("node1", policy.Delta{Node: "node1", FromGeneration: gen, Generation: gen + 1, RemovedRules: []string{"x/web/ingress/0"}}); err != nil {
		t.Fatal(err)
	}
	gen++
	patch("the rule removed", "db")
}
