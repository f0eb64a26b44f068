package transition

import (
	"cmp"
	"slices"
	"strings"

	"github.com/kovs-net/kovs/go-controller/pkg/policy"
)

// receiver is one Watch of a node's share (an agent's stream, the realization tracker):
// it has been sent the node's share at gen, and keeps, for every entry the gate changes
// since, the value the receiver has, so that its next delta is exact however many
// changes it coalesces.
type receiver struct {
	gen    uint64
	before map[policy.EntryKey]policy.Entry
	// isolation, pods and cluster, when set, are the receiver's before a change.
	isolation *policy.Isolation
	pods      *[]policy.PodKey
	cluster   *[]policy.ClusterRule
	// release: the node's floor was released since r's last delta.
	release bool
	wake    chan struct{}
	// done is closed when the receiver is cancelled.
	done chan struct{}
}

func newReceiver(gen uint64) *receiver {
	return &receiver{gen: gen, before: map[policy.EntryKey]policy.Entry{}, wake: make(chan struct{}, 1)}
}

func (r *receiver) kick() {
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// delta takes what changed for r since its last delta as a delta from the share r has to
// sent, its address set patches through memo (shared with the other receivers of the
// same change). It reports false when r is caught up.
func (r *receiver) delta(sent *policy.NodeShare, memo *policy.SetMemo) (policy.Delta, bool) {
	if r.gen == sent.Generation && len(r.before) == 0 && r.isolation == nil && r.pods == nil && r.cluster == nil && !r.release {
		return policy.Delta{}, false
	}
	d := policy.Delta{Node: sent.Node, FromGeneration: r.gen, Generation: sent.Generation, Release: r.release}
	r.release = false
	keys := make([]policy.EntryKey, 0, len(r.before))
	for k := range r.before {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b policy.EntryKey) int {
		return cmp.Or(cmp.Compare(a.Kind, b.Kind), strings.Compare(a.ID, b.ID))
	})
	for _, k := range keys {
		was, now := r.before[k], sent.Entry(k)
		if memo.EqualEntries(was, now, k.Kind) {
			continue
		}
		addChange(&d, k, was, now, memo)
	}
	if r.isolation != nil && !r.isolation.Equal(sent.Isolation) {
		iso := sent.Isolation
		d.Isolation = &iso
	}
	if r.pods != nil {
		d.AddedPods, d.RemovedPods = diffKeys(*r.pods, sent.Pods)
	}
	if r.cluster != nil && !policy.EqualClusterRules(*r.cluster, sent.ClusterRules) {
		rules := slices.Clone(sent.ClusterRules)
		if rules == nil {
			rules = []policy.ClusterRule{} // none left, not "unchanged"
		}
		d.ClusterRules = &rules
	}
	r.gen, r.before, r.isolation, r.pods, r.cluster = sent.Generation, map[policy.EntryKey]policy.Entry{}, nil, nil, nil
	return d, true
}

func addChange(d *policy.Delta, k policy.EntryKey, was, now policy.Entry, memo *policy.SetMemo) {
	switch k.Kind {
	case policy.AddressSetEntry:
		switch {
		case !now.Present:
			d.RemovedAddressSets = append(d.RemovedAddressSets, k.ID)
		case !was.Present:
			d.AddedAddressSets = append(d.AddedAddressSets, now.AddressSet)
		default:
			added, removed := memo.Diff(was.AddressSet.Addresses, now.AddressSet.Addresses)
			d.UpdatedAddressSets = append(d.UpdatedAddressSets, policy.AddressSetPatch{ID: k.ID, Added: added, Removed: removed})
		}
	case policy.AppliedToSetEntry:
		switch {
		case !now.Present:
			d.RemovedAppliedToSets = append(d.RemovedAppliedToSets, k.ID)
		case !was.Present:
			d.AddedAppliedToSets = append(d.AddedAppliedToSets, now.AppliedToSet)
		default:
			d.UpdatedAppliedToSets = append(d.UpdatedAppliedToSets, now.AppliedToSet)
		}
	default:
		switch {
		case !now.Present:
			d.RemovedRules = append(d.RemovedRules, k.ID)
		case !was.Present:
			d.AddedRules = append(d.AddedRules, now.Rule)
		default:
			d.UpdatedRules = append(d.UpdatedRules, now.Rule)
		}
	}
}

// diffKeys compares two sorted lists.
func diffKeys(old, nu []policy.PodKey) (added, removed []policy.PodKey) {
	for _, k := range nu {
		if _, ok := slices.BinarySearchFunc(old, k, policy.PodKey.Compare); !ok {
			added = append(added, k)
		}
	}
	for _, k := range old {
		if _, ok := slices.BinarySearchFunc(nu, k, policy.PodKey.Compare); !ok {
			removed = append(removed, k)
		}
	}
	return added, removed
}
