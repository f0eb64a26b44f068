package realization

import (
	"slices"
	"strings"
	"testing"

	"k8s.io/client-go/tools/cache"
)

// TestPolicySelectorsFollowPolicies checks the index of the policies that select a pod
// through a policy's add, a change of its podSelector, an invalid one, and its deletion.
func TestPolicySelectorsFollowPolicies(t *testing.T) {
	x := newPolicySelectors()
	h := x.handler()
	check := func(step string, podLabel string, want ...string) {
		t.Helper()
		k, v, _ := strings.Cut(podLabel, "=")
		got := x.selecting("x", map[string]string{k: v})
		slices.Sort(got)
		if !slices.Equal(got, want) {
			t.Errorf("%s: policies selecting a pod %s = %v, want %v", step, podLabel, got, want)
		}
	}
	web, all := policyObj("web", "app=web"), policyObj("all", "")
	h.OnAdd(web, true)
	h.OnAdd(all, true)
	check("added", "app=web", "x/all", "x/web")
	check("added", "app=db", "x/all")
	db := policyObj("web", "app=db")
	h.OnUpdate(web, db)
	check("selector changed to app=db", "app=web", "x/all")
	check("selector changed to app=db", "app=db", "x/all", "x/web")
	invalid := db.DeepCopy()
	invalid.Spec.PodSelector.MatchLabels = map[string]string{"app": "not a valid value!"}
	h.OnUpdate(db, invalid)
	check("selector made invalid", "app=db", "x/all")
	h.OnDelete(cache.DeletedFinalStateUnknown{Key: "x/all", Obj: all})
	check("deleted", "app=db")
	if len(x.byNamespace) != 0 {
		t.Errorf("an empty namespace is kept: %v", x.byNamespace)
	}
}
