package harness

import (
	"context"
	"fmt"
	"net/netip"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kovs-net/kovs/go-controller/pkg/controller/receipts"
)

// The fan-out phase measures the changes that reach every node, which the shape-(a)
// workload never makes (its policies concern about as many nodes as a namespace has
// pods): a namespace with one pod on each node; policies over all of its pods created and
// deleted one at a time (every node concerned); then, with one such policy in force, pods
// of that namespace created and deleted one at a time, each an address that enters and
// leaves an address set every node holds (the policy's peers). Nothing else changes
// meanwhile. The namespace's pods stay for the rest of the run, out of the churn's reach.
const wideNamespace = "scale-wide"

// FanOutResult is what the fan-out phase measured.
type FanOutResult struct {
	// Nodes is how many agents held the peers' policy: the nodes every address change
	// concerned.
	Nodes int
	// Policy is a policy over one pod on every node, created or deleted, from before the
	// write to the last node applying it; PolicyLost those some node had not applied by
	// the deadline; PolicyClock the same changes split at kovs-controller's receipt;
	// PolicyTraffic what each agent received for each.
	Policy        Durations
	PolicyLost    int
	PolicyClock   KovsClock
	PolicyTraffic []SpanSample
	// PolicyTails is, for each of those changes in order, when its nodes applied it.
	PolicyTails []NodeTail
	// Added is a pod created while the policy's peers select it: from before the Create
	// call to its address in an address set of every node's share; Seen from before the
	// call to the harness's own pod informer delivering the pod's address (kube-apiserver,
	// the hollow kubelet's allocation and status write, the watch); AddedKovs from
	// kovs-controller's receipt of that pod version to the last node. Removed and
	// RemovedKovs the same for the pod's deletion (from before the Delete call, and from
	// the controller's first receipt of the pod after it began).
	Added, Seen, AddedKovs, Removed, RemovedKovs Durations
	// Lost counts the address changes some node had not applied by the deadline;
	// NoReceipt those kovs-controller's ring held no receipt for (or one after the last
	// node applied it).
	Lost, NoReceipt int
	// AddressTraffic is what each agent received for each address change (span 1: the
	// change concerns the one set).
	AddressTraffic []SpanSample
}

// addressChange is one address probe.
type addressChange struct {
	ref    podRef
	create bool
	start  time.Time
	// version is, for a creation, the pod version that carried its address, as the
	// harness's informer delivered it.
	version string
	last    time.Time // the last node's; zero if lost
}

// podAddresses records when the harness's pod informer first delivered the address of
// each pod of wideNamespace, and in which version.
type podAddresses struct {
	mu   sync.Mutex
	seen map[podRef]addressSeen
}

type addressSeen struct {
	ip      netip.Addr
	version string
	at      time.Time
}

func (w *podAddresses) observe(pod *corev1.Pod) {
	if pod.Namespace != wideNamespace || pod.Status.PodIP == "" {
		return
	}
	ip, err := netip.ParseAddr(pod.Status.PodIP)
	if err != nil {
		return
	}
	now := time.Now()
	ref := podRef{pod.Namespace, pod.Name}
	w.mu.Lock()
	defer w.mu.Unlock()
	if _, ok := w.seen[ref]; !ok {
		if w.seen == nil {
			w.seen = map[podRef]addressSeen{}
		}
		w.seen[ref] = addressSeen{ip: ip, version: pod.ResourceVersion, at: now}
	}
}

func (w *podAddresses) get(ref podRef) (addressSeen, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	s, ok := w.seen[ref]
	return s, ok
}

// fanOut is the fan-out phase.
func (h *Harness) fanOut(ctx context.Context) error {
	n := h.cfg.FanOutProbes
	if n == 0 {
		return nil
	}
	fo := &h.result.FanOut
	err := retryWrite(ctx, func() error {
		_, err := h.workload.CoreV1().Namespaces().Create(ctx, namespaceObject(wideNamespace), metav1.CreateOptions{})
		return err
	})
	if err != nil {
		return fmt.Errorf("namespace %s: %w", wideNamespace, err)
	}
	wide := make([]podRef, len(h.nodes))
	err = h.parallel(ctx, len(h.nodes), func(ctx context.Context, i int) error {
		wide[i] = podRef{wideNamespace, "wide-" + h.nodes[i]}
		return h.createPlaced(ctx, wide[i], h.model.placeOn(wide[i], 1, h.nodes[i]))
	})
	if err != nil {
		return fmt.Errorf("pods of %s: %w", wideNamespace, err)
	}
	defer func() {
		for _, ref := range wide { // the churn leaves them alone
			h.model.remove(ref)
		}
	}()
	if err := h.waitAddresses(ctx); err != nil {
		return err
	}

	sel := selector{wideNamespace, 1}
	h.realization.results()
	h.realization.finishedResults()
	var finished []finishedChange
	for i := range n {
		for _, create := range []bool{true, false} {
			before := h.snapshotCounts()
			samples, err := h.probe(ctx, fmt.Sprintf("wide-%d", i), sel, create)
			if err != nil {
				return err
			}
			fo.PolicyTraffic = append(fo.PolicyTraffic, samples...)
			reconnected := h.reconnectedSince(before)
			for _, f := range h.realization.finishedResults() {
				f.tail.Reconnected = reconnected
				fo.PolicyTails = append(fo.PolicyTails, f.tail)
				h.logf("fan-out policy %s/%s (create %t): %d nodes applied it at p50 %s, p90 %s, p99 %s, the second last %s, the last (%s) %s; %d agents took a new snapshot meanwhile",
					f.policy.Namespace, f.policy.Name, f.create, f.tail.Nodes, f.tail.P50, f.tail.P90, f.tail.P99, f.tail.Second, f.tail.LastNode, f.tail.Last, reconnected)
				finished = append(finished, f)
			}
		}
	}
	fo.Policy, fo.PolicyLost, _ = h.realization.results()
	// Pulled now: the address probes' writes to every node would push these changes'
	// out of the ring.
	if dump, err := h.controllerReceipts(ctx); err != nil {
		h.logf("kovs-controller's receipts: %v", err)
	} else {
		fo.PolicyClock = splitAtReceipts(finished, dump)
	}

	peers := policyKey{wideNamespace, "wide-peers"}
	if err := h.setPolicy(ctx, peers.Name, sel, true); err != nil {
		return err
	}
	var holders []*Agent
	for _, a := range h.sortedAgents() {
		if a.hasPolicy(peers) {
			holders = append(holders, a)
		}
	}
	fo.Nodes = len(holders)
	var changes []addressChange
	for j := range n {
		ref := podRef{wideNamespace, fmt.Sprintf("wide-extra-%d", j)}
		node := h.nodes[(j*7919)%len(h.nodes)]
		for _, create := range []bool{true, false} {
			c, err := h.addressProbe(ctx, holders, ref, node, create)
			if err != nil {
				return err
			}
			changes = append(changes, c)
		}
	}
	if dump, err := h.controllerReceipts(ctx); err != nil {
		h.logf("kovs-controller's receipts: %v", err)
	} else {
		fo.splitAddresses(changes, dump)
	}
	return h.setPolicy(ctx, peers.Name, sel, false)
}

// snapshotCounts is how many snapshots each agent has taken so far.
func (h *Harness) snapshotCounts() map[string]int64 {
	out := map[string]int64{}
	for _, a := range h.sortedAgents() {
		out[a.node] = a.snapshots.Load()
	}
	return out
}

// reconnectedSince counts the agents that took a snapshot since before.
func (h *Harness) reconnectedSince(before map[string]int64) int {
	n := 0
	for _, a := range h.sortedAgents() {
		if a.snapshots.Load() > before[a.node] {
			n++
		}
	}
	return n
}

// setPolicy creates or deletes a policy and waits until every node it concerns has
// applied it; not a probe: its time is in no result.
func (h *Harness) setPolicy(ctx context.Context, name string, sel selector, create bool) error {
	c, err := h.changePolicy(ctx, name, sel, create, h.model.spans(sel))
	if err != nil {
		return err
	}
	defer func() { h.realization.results(); h.realization.finishedResults() }()
	select {
	case <-c.done:
		return nil
	case <-time.After(h.cfg.RealizationDeadline):
		return fmt.Errorf("policy %s/%s not applied on every node it concerns within %s", sel.Namespace, name, h.cfg.RealizationDeadline)
	case <-ctx.Done():
		return ctx.Err()
	}
}

// addressProbe creates (or deletes) the pod ref on node and waits until every holder's
// share has its address in (or out of) its address sets.
func (h *Harness) addressProbe(ctx context.Context, holders []*Agent, ref podRef, node string, create bool) (addressChange, error) {
	fo := &h.result.FanOut
	before := make([]Traffic, len(holders))
	for i, a := range holders {
		a.startAddressLog()
		before[i] = a.traffic()
	}
	defer func() {
		for _, a := range holders {
			a.stopAddressLog()
		}
	}()
	c := addressChange{ref: ref, create: create, start: time.Now()}
	var seen addressSeen
	if create {
		if err := h.createPlaced(ctx, ref, h.model.placeOn(ref, 1, node)); err != nil {
			return c, fmt.Errorf("pod %s/%s: %w", ref.Namespace, ref.Name, err)
		}
		err := waitUntil(ctx, h.cfg.RealizationDeadline, 5*time.Millisecond, "the pod's address", func() error {
			var ok bool
			if seen, ok = h.addresses.get(ref); !ok {
				return fmt.Errorf("pod %s/%s has no address in the harness's informer", ref.Namespace, ref.Name)
			}
			return nil
		})
		if err != nil {
			return c, err
		}
		c.version = seen.version
		fo.Seen = append(fo.Seen, seen.at.Sub(c.start))
	} else {
		var ok bool
		if seen, ok = h.addresses.get(ref); !ok {
			return c, fmt.Errorf("pod %s/%s: its address was never seen", ref.Namespace, ref.Name)
		}
		if err := h.deletePod(ctx, ref); err != nil {
			return c, fmt.Errorf("pod %s/%s: %w", ref.Namespace, ref.Name, err)
		}
	}
	var last time.Time
	err := waitUntil(ctx, h.cfg.RealizationDeadline, 20*time.Millisecond, "every node's address sets", func() error {
		last = time.Time{}
		missing := 0
		for _, a := range holders {
			t := a.addressTimes(seen.ip)
			at := t.Added
			if !create {
				at = t.Removed
			}
			if at.IsZero() {
				missing++
			} else if at.After(last) {
				last = at
			}
		}
		if missing > 0 {
			return fmt.Errorf("%d of %d nodes have not applied %s", missing, len(holders), seen.ip)
		}
		return nil
	})
	if err != nil {
		fo.Lost++
		h.logf("address change of %s/%s lost: %v", ref.Namespace, ref.Name, err)
		return c, nil
	}
	c.last = last
	if create {
		fo.Added = append(fo.Added, last.Sub(c.start))
	} else {
		fo.Removed = append(fo.Removed, last.Sub(c.start))
	}
	time.Sleep(settle)
	for i, a := range holders {
		fo.AddressTraffic = append(fo.AddressTraffic, SpanSample{Span: 1, Traffic: a.traffic().Sub(before[i])})
	}
	return c, nil
}

// splitAddresses times each address change from kovs-controller's receipt of the pod: a
// creation from the version that carried the address, a deletion from the first version
// received after the Delete call began.
func (fo *FanOutResult) splitAddresses(changes []addressChange, dump receipts.Dump) {
	for _, c := range changes {
		if c.last.IsZero() {
			continue
		}
		var at time.Time
		for _, r := range dump.Receipts {
			if r.Kind != "Pod" || r.Namespace != c.ref.Namespace || r.Name != c.ref.Name {
				continue
			}
			if (c.create && r.ResourceVersion == c.version) || (!c.create && !r.At.Before(c.start)) {
				at = r.At
				break
			}
		}
		switch {
		case at.IsZero() || at.After(c.last):
			fo.NoReceipt++
		case c.create:
			fo.AddedKovs = append(fo.AddedKovs, c.last.Sub(at))
		default:
			fo.RemovedKovs = append(fo.RemovedKovs, c.last.Sub(at))
		}
	}
}
