package labelindex

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"k8s.io/apimachinery/pkg/labels"
)

// TestMatchingEqualsEvaluatingEverySelector compares the index with evaluating every
// selector, over random selectors of every operator, random label sets, and items
// re-added with another selector or removed (a stale filing would show).
func TestMatchingEqualsEvaluatingEverySelector(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	keys, values := []string{"app", "tier", "env"}, []string{"a", "b", "c"}
	pick := func(s []string) string { return s[rng.IntN(len(s))] }
	randomSelector := func() labels.Selector {
		forms := []string{"", "%s=%s", "%s==%s", "%s!=%s", "%s in (%s)", "%s in (%s,b)", "%s notin (%s)", "%s", "!%s",
			"%s=%s,tier", "%s in (a,%s),env!=c"}
		form := pick(forms)
		text := form
		switch {
		case form == "%s" || form == "!%s":
			text = fmt.Sprintf(form, pick(keys))
		case form != "":
			text = fmt.Sprintf(form, pick(keys), pick(values))
		}
		sel, err := labels.Parse(text)
		if err != nil {
			t.Fatalf("parse %q: %v", text, err)
		}
		return sel
	}
	randomSet := func() labels.Set {
		set := labels.Set{}
		for _, k := range keys {
			if rng.IntN(3) > 0 {
				set[k] = pick(values)
			}
		}
		return set
	}
	x := New[int]()
	want := map[int]labels.Selector{}
	for step := range 2000 {
		item := rng.IntN(40)
		if rng.IntN(4) == 0 {
			x.Remove(item)
			delete(want, item)
		} else {
			sel := randomSelector()
			x.Add(item, sel)
			want[item] = sel
		}
		set := randomSet()
		var got, expected []int
		x.Matching(set, func(i int) { got = append(got, i) })
		for i, sel := range want {
			if sel.Matches(set) {
				expected = append(expected, i)
			}
		}
		slices.Sort(got)
		slices.Sort(expected)
		if !slices.Equal(got, expected) {
			t.Fatalf("step %d: items matching %v = %v, want %v", step, set, got, expected)
		}
		if x.Len() != len(want) {
			t.Fatalf("step %d: %d items, want %d", step, x.Len(), len(want))
		}
	}
}
