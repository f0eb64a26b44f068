// Package labelindex finds, among many label selectors, those that match a set of labels
// without evaluating them all. A selector that requires a label to have one of some values
// (key=value, key==value, key in (values)) is filed under each of those key and value
// pairs, and a label set looks up only its own pairs; a selector that requires no value
// (everything, key exists, key not in, key does not exist) is evaluated for every set.
// Kubernetes selects by a few labels with values almost always (matchLabels), so most
// selectors are filed and a lookup costs what matches, not what is indexed.
//
// client-go's cache.Indexer indexes objects by values computed from them, not selectors
// by the label sets they match, hence this package.
package labelindex

import (
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
)

type pair struct{ key, value string }

// Index holds items, each with a selector. It is not safe for concurrent use.
type Index[T comparable] struct {
	filed map[pair]map[T]labels.Selector
	// rest are the items whose selector requires no value.
	rest  map[T]labels.Selector
	items map[T]entry
}

type entry struct {
	sel   labels.Selector
	pairs []pair // where the item is filed; none: in rest
}

// New returns an empty index.
func New[T comparable]() *Index[T] {
	return &Index[T]{filed: map[pair]map[T]labels.Selector{}, rest: map[T]labels.Selector{}, items: map[T]entry{}}
}

// Len is the number of items.
func (x *Index[T]) Len() int { return len(x.items) }

// Add files item under its selector, replacing the selector it had.
func (x *Index[T]) Add(item T, sel labels.Selector) {
	x.Remove(item)
	e := entry{sel: sel, pairs: filing(sel)}
	x.items[item] = e
	if len(e.pairs) == 0 {
		x.rest[item] = sel
		return
	}
	for _, p := range e.pairs {
		m := x.filed[p]
		if m == nil {
			m = map[T]labels.Selector{}
			x.filed[p] = m
		}
		m[item] = sel
	}
}

// Remove forgets item; an item not in the index is ignored.
func (x *Index[T]) Remove(item T) {
	e, ok := x.items[item]
	if !ok {
		return
	}
	delete(x.items, item)
	if len(e.pairs) == 0 {
		delete(x.rest, item)
		return
	}
	for _, p := range e.pairs {
		m := x.filed[p]
		delete(m, item)
		if len(m) == 0 {
			delete(x.filed, p)
		}
	}
}

// Matching calls f, once each, for the items whose selector matches set, in no
// particular order. f must not change the index.
func (x *Index[T]) Matching(set labels.Set, f func(T)) {
	for k, v := range set {
		// An item is filed under one key, so each is seen at most once: set has one value
		// for the key.
		for item, sel := range x.filed[pair{k, v}] {
			if sel.Matches(set) {
				f(item)
			}
		}
	}
	for item, sel := range x.rest {
		if sel.Matches(set) {
			f(item)
		}
	}
}

// RequiredValues returns a label key and the values a selector requires it to have one
// of (the requirement of a value with the fewest of them), or "" when it requires no
// value: a label set the selector matches has key set to one of values. An index of
// label sets by key and value can then look up the candidates of a selector.
func RequiredValues(sel labels.Selector) (key string, values []string) {
	pairs := filing(sel)
	if len(pairs) == 0 {
		return "", nil
	}
	for _, p := range pairs {
		values = append(values, p.value)
	}
	return pairs[0].key, values
}

// filing returns the pairs a selector is filed under: the values of its requirement of a
// value with the fewest of them (none when it requires no value).
func filing(sel labels.Selector) []pair {
	reqs, selectable := sel.Requirements()
	if !selectable {
		return nil
	}
	var best []string
	key := ""
	for i := range reqs {
		switch reqs[i].Operator() {
		case selection.Equals, selection.DoubleEquals, selection.In:
			if values := reqs[i].ValuesUnsorted(); best == nil || len(values) < len(best) {
				best, key = values, reqs[i].Key()
			}
		}
	}
	pairs := make([]pair, 0, len(best))
	for _, v := range best {
		pairs = append(pairs, pair{key, v})
	}
	return pairs
}
