package policy

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
)

// ErrGeneration is returned by Delta.Apply when the delta does not follow the share's
// generation: the receiver missed something and needs a new snapshot.
var ErrGeneration = errors.New("delta does not follow the share's generation")

// AddressSetPatch changes the addresses of an address set the receiver already has.
type AddressSetPatch struct {
	ID      string         `json:"id"`
	Added   []netip.Prefix `json:"added,omitempty"`
	Removed []netip.Prefix `json:"removed,omitempty"`
}

// Delta turns a node's share at FromGeneration into its share at Generation.
//
// Apply order: removals first, then additions, then updates. An ID may appear both in a
// Removed list and in the matching Added list (an address set that left the node and
// came back with other addresses); no other combination repeats an ID.
type Delta struct {
	Node           string `json:"node"`
	FromGeneration uint64 `json:"fromGeneration"`
	Generation     uint64 `json:"generation"`

	AddedAddressSets   []AddressSet      `json:"addedAddressSets,omitempty"`
	UpdatedAddressSets []AddressSetPatch `json:"updatedAddressSets,omitempty"`
	RemovedAddressSets []string          `json:"removedAddressSets,omitempty"`

	AddedAppliedToSets   []AppliedToSet `json:"addedAppliedToSets,omitempty"`
	UpdatedAppliedToSets []AppliedToSet `json:"updatedAppliedToSets,omitempty"`
	RemovedAppliedToSets []string       `json:"removedAppliedToSets,omitempty"`

	AddedRules   []Rule   `json:"addedRules,omitempty"`
	UpdatedRules []Rule   `json:"updatedRules,omitempty"`
	RemovedRules []string `json:"removedRules,omitempty"`

	// Isolation, when set, is the node's new isolation, replacing the old one whole.
	Isolation *Isolation `json:"isolation,omitempty"`

	// AddedPods and RemovedPods change the share's Pods, the node's evaluated pods; each
	// list is sorted. A pod that comes with a new UID is one removed and one added.
	AddedPods   []PodKey `json:"addedPods,omitempty"`
	RemovedPods []PodKey `json:"removedPods,omitempty"`

	// ClusterRules, when set, are the node's new cluster rules, replacing the old ones
	// whole (an empty list: none left).
	ClusterRules *[]ClusterRule `json:"clusterRules,omitempty"`

	// Release ends the meet a snapshot with MeetPrevious began: from this delta on, the
	// receiver enforces its share alone.
	Release bool `json:"release,omitempty"`
}

// Apply applies the delta to share, which must be the same node's share at
// FromGeneration. It checks the whole delta before changing anything: on error the share
// is unchanged (and the receiver should ask for a new snapshot).
func (d Delta) Apply(share *NodeShare) error { return d.ApplyWith(share, nil) }

// ApplyWith is Apply with the address sets patched through memo: shares that held the
// same list and get the same patch end up sharing the result.
func (d Delta) ApplyWith(share *NodeShare, memo *SetMemo) error {
	if d.Node != share.Node {
		return fmt.Errorf("delta for node %s applied to the share of node %s", d.Node, share.Node)
	}
	if d.FromGeneration != share.Generation || d.Generation < d.FromGeneration {
		return fmt.Errorf("delta %d->%d on share at %d: %w", d.FromGeneration, d.Generation, share.Generation, ErrGeneration)
	}
	if err := d.check(share); err != nil {
		return fmt.Errorf("delta %d->%d for node %s: %w", d.FromGeneration, d.Generation, d.Node, err)
	}
	if share.AddressSets == nil {
		share.AddressSets = map[string]AddressSet{}
	}
	if share.AppliedToSets == nil {
		share.AppliedToSets = map[string]AppliedToSet{}
	}
	if share.Rules == nil {
		share.Rules = map[string]Rule{}
	}
	d.apply(share, memo)
	share.Generation = d.Generation
	if d.Release {
		share.MeetPrevious = false
	}
	return nil
}

func (d Delta) apply(share *NodeShare, memo *SetMemo) {
	for _, id := range d.RemovedAddressSets {
		delete(share.AddressSets, id)
	}
	for _, id := range d.RemovedAppliedToSets {
		delete(share.AppliedToSets, id)
	}
	for _, id := range d.RemovedRules {
		delete(share.Rules, id)
	}
	for _, s := range d.AddedAddressSets {
		share.AddressSets[s.ID] = s
	}
	for _, s := range d.AddedAppliedToSets {
		share.AppliedToSets[s.ID] = s
	}
	for _, r := range d.AddedRules {
		share.Rules[r.ID] = r
	}
	for _, p := range d.UpdatedAddressSets {
		old := share.AddressSets[p.ID]
		share.AddressSets[p.ID] = AddressSet{ID: p.ID, Addresses: memo.Patch(old.Addresses, p.Added, p.Removed)}
	}
	for _, s := range d.UpdatedAppliedToSets {
		share.AppliedToSets[s.ID] = s
	}
	for _, r := range d.UpdatedRules {
		share.Rules[r.ID] = r
	}
	if d.Isolation != nil {
		share.Isolation = *d.Isolation
	}
	if d.ClusterRules != nil {
		share.ClusterRules = *d.ClusterRules
	}
	if len(d.AddedPods)+len(d.RemovedPods) > 0 {
		share.Pods = patchPods(share.Pods, d.AddedPods, d.RemovedPods)
	}
}

// patchPods returns the sorted list of pods minus removed plus added, in a new slice:
// holders of the old share keep their list.
func patchPods(pods, added, removed []PodKey) []PodKey {
	out := make([]PodKey, 0, len(pods)+len(added))
	for _, k := range pods {
		if _, gone := slices.BinarySearchFunc(removed, k, PodKey.Compare); !gone {
			out = append(out, k)
		}
	}
	out = append(out, added...)
	slices.SortFunc(out, PodKey.Compare)
	return out
}

// check verifies that every removal and update names something the share has and every
// addition something it will not have after the removals.
func (d Delta) check(share *NodeShare) error {
	if err := checkKind("address set", share.AddressSets, d.RemovedAddressSets, ids(d.AddedAddressSets, func(s AddressSet) string { return s.ID }),
		ids(d.UpdatedAddressSets, func(p AddressSetPatch) string { return p.ID })); err != nil {
		return err
	}
	if err := checkKind("applied-to set", share.AppliedToSets, d.RemovedAppliedToSets, ids(d.AddedAppliedToSets, func(s AppliedToSet) string { return s.ID }),
		ids(d.UpdatedAppliedToSets, func(s AppliedToSet) string { return s.ID })); err != nil {
		return err
	}
	if err := checkKind("rule", share.Rules, d.RemovedRules, ids(d.AddedRules, func(r Rule) string { return r.ID }),
		ids(d.UpdatedRules, func(r Rule) string { return r.ID })); err != nil {
		return err
	}
	if d.ClusterRules != nil {
		if err := validateClusterRules(*d.ClusterRules); err != nil {
			return err
		}
	}
	return d.checkPods(share)
}

// checkPods verifies that the pod lists are sorted, that removed pods are in the share and
// that added ones are not (once the removed ones are gone).
func (d Delta) checkPods(share *NodeShare) error {
	if !isSortedUnique(d.AddedPods) || !isSortedUnique(d.RemovedPods) {
		return fmt.Errorf("added or removed pods not sorted and unique")
	}
	for _, k := range d.RemovedPods {
		if _, ok := slices.BinarySearchFunc(share.Pods, k, PodKey.Compare); !ok {
			return fmt.Errorf("remove pod %s/%s (%s): not present", k.Namespace, k.Name, k.UID)
		}
	}
	for _, k := range d.AddedPods {
		_, present := slices.BinarySearchFunc(share.Pods, k, PodKey.Compare)
		_, removed := slices.BinarySearchFunc(d.RemovedPods, k, PodKey.Compare)
		if present && !removed {
			return fmt.Errorf("add pod %s/%s (%s): already present", k.Namespace, k.Name, k.UID)
		}
	}
	return nil
}

func isSortedUnique(keys []PodKey) bool {
	for i := 1; i < len(keys); i++ {
		if keys[i-1].Compare(keys[i]) >= 0 {
			return false
		}
	}
	return true
}

func checkKind[V any](kind string, have map[string]V, removed, added, updated []string) error {
	// present records, for the IDs the delta names, whether they exist at each step.
	present := make(map[string]bool, len(removed)+len(added)+len(updated))
	has := func(id string) bool {
		if p, ok := present[id]; ok {
			return p
		}
		_, ok := have[id]
		return ok
	}
	for _, id := range removed {
		if !has(id) {
			return fmt.Errorf("remove %s %s: not present", kind, id)
		}
		present[id] = false
	}
	addedNow := make(map[string]bool, len(added))
	for _, id := range added {
		if has(id) {
			return fmt.Errorf("add %s %s: already present", kind, id)
		}
		present[id], addedNow[id] = true, true
	}
	updatedNow := make(map[string]bool, len(updated))
	for _, id := range updated {
		switch {
		case !has(id):
			return fmt.Errorf("update %s %s: not present", kind, id)
		case addedNow[id]:
			return fmt.Errorf("update %s %s: also added", kind, id)
		case updatedNow[id]:
			return fmt.Errorf("update %s %s: updated twice", kind, id)
		}
		updatedNow[id] = true
	}
	return nil
}

func ids[T any](items []T, id func(T) string) []string {
	out := make([]string, len(items))
	for i, it := range items {
		out[i] = id(it)
	}
	return out
}
