package realization

import (
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
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

// TestSelectedPodsEqualListing checks the index of pods by namespace and label behind a
// policy's status: through random pod creations, relabellings and deletions in two
// namespaces, the pods every selector finds through it (matchLabels of one or two
// labels, "in", and the selectors that require no value and list the namespace) are
// those a listing of the namespace finds.
func TestSelectedPodsEqualListing(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	pick := func(s ...string) string { return s[rng.IntN(len(s))] }
	selectors := []string{"", "app=web", "app=db", "app=web,tier=fe", "app in (web,db)", "app in (web,cache),tier=be",
		"tier", "!tier", "app notin (web)", "tier=fe,app"}
	pods := cache.NewIndexer(cache.MetaNamespaceKeyFunc,
		cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc, podLabelsIndex: podLabelPairs})
	for step := range 400 {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: pick("x", "y"), Name: pick("a", "b", "c", "d", "e", "f")}}
		if rng.IntN(5) == 0 {
			if err := pods.Delete(p); err != nil {
				t.Fatal(err)
			}
		} else {
			p.Labels = map[string]string{}
			for range rng.IntN(3) {
				p.Labels[pick("app", "tier", "rev")] = pick("web", "db", "cache", "fe", "be")
			}
			if err := pods.Update(p); err != nil { // adds it if new
				t.Fatal(err)
			}
		}
		for _, s := range selectors {
			sel, err := labels.Parse(s)
			if err != nil {
				t.Fatal(err)
			}
			for _, ns := range []string{"x", "y"} {
				var want []string
				for _, obj := range pods.List() {
					if q := obj.(*corev1.Pod); q.Namespace == ns && sel.Matches(labels.Set(q.Labels)) {
						want = append(want, ns+"/"+q.Name)
					}
				}
				found, err := selectedPods(pods, ns, sel)
				if err != nil {
					t.Fatal(err)
				}
				var got []string
				for _, q := range found {
					got = append(got, q.Namespace+"/"+q.Name)
				}
				slices.Sort(want)
				slices.Sort(got)
				if !slices.Equal(got, want) {
					t.Fatalf("step %d: selector %q in %s found %v, a listing %v", step, s, ns, got, want)
				}
			}
		}
	}
}
