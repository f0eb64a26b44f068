package realization

import (
	"context"
	"errors"
	"maps"
	"math"
	"sync"
	"time"

	log "github.com/sirupsen/logrus"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"

	"github.com/kovs-net/kovs/go-controller/pkg/policy"
	"github.com/kovs-net/kovs/go-controller/pkg/policy/stream"
)

// maxGeneration marks a policy that a node's share does not reflect yet.
const maxGeneration = math.MaxUint64

// Tracker follows every node's share and its agent's realized generation. It implements
// stream.Reports.
type Tracker struct {
	mu    sync.Mutex
	nodes map[string]*nodeRecord
	// follows are the cancel functions of the nodes followed.
	follows map[string]context.CancelFunc
	// changed is told what a change of a node's share (fromShare) or of its realized
	// generation concerns; clusterChanged which ClusterNetworkPolicies (cluster.go).
	changed        Changed
	clusterChanged ClusterChanged
	// sets patches the nodes' address sets: the nodes that held the same list and get
	// the same patch share the result, so that the tracker keeps one copy of a set all
	// nodes hold rather than one per node (policy.SetMemo).
	sets *policy.SetMemo
}

// maxSetMemo bounds the tracker's memo: past it, the memo starts afresh (a node still to
// apply a patch then makes a list of its own, which the next nodes share).
const maxSetMemo = 4096

// Changed is told which policies, and the policies of which pods, need another look:
// after a change of a node's share (reported ""), or after the report of the node
// reported, which made the policies realized there (and only there: the rest of what
// their statuses say of the other nodes still holds).
type Changed func(policies []types.NamespacedName, pods []policy.PodKey, reported string)

// NewTracker returns a tracker that tells changed what needs another look.
func NewTracker(changed Changed) *Tracker {
	return &Tracker{nodes: map[string]*nodeRecord{}, follows: map[string]context.CancelFunc{}, changed: changed,
		sets: policy.NewSetMemo()}
}

var _ stream.Reports = (*Tracker)(nil)

// Realized records the generation a node's agent reports.
func (t *Tracker) Realized(node string, generation uint64) {
	t.mu.Lock()
	r := t.record(node)
	var cluster []string
	if r.realized < r.clusterGen && r.clusterGen <= generation {
		cluster = clusterPolicies(r.share.ClusterRules)
	}
	r.realized = generation
	var ready []types.NamespacedName
	for key, need := range r.waiting {
		if need <= generation {
			ready = append(ready, key)
			delete(r.waiting, key)
		}
	}
	t.mu.Unlock()
	t.tellCluster(cluster)
	if len(ready) > 0 {
		t.changed(ready, nil, node)
	}
}

func (t *Tracker) record(node string) *nodeRecord {
	r, ok := t.nodes[node]
	if !ok {
		r = newNodeRecord(node)
		t.nodes[node] = r
	}
	return r
}

// Run follows the share of every Node the informer knows until ctx ends.
func (t *Tracker) Run(ctx context.Context, src stream.Source, nodes cache.SharedIndexInformer) error {
	reg, err := nodes.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj interface{}) {
			if n, ok := obj.(*corev1.Node); ok {
				t.follow(ctx, src, n.Name)
			}
		},
		DeleteFunc: func(obj interface{}) {
			if key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj); err == nil {
				t.forget(key)
			}
		},
	})
	if err != nil {
		return err
	}
	<-ctx.Done()
	return nodes.RemoveEventHandler(reg)
}

// follow subscribes to a node's share, once.
func (t *Tracker) follow(ctx context.Context, src stream.Source, node string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if _, ok := t.follows[node]; ok {
		return
	}
	ctx, cancel := context.WithCancel(ctx)
	t.follows[node] = cancel
	go t.watch(ctx, src, node)
}

// forget stops following a deleted node and drops what is known of it.
func (t *Tracker) forget(node string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if cancel, ok := t.follows[node]; ok {
		cancel()
		delete(t.follows, node)
	}
	delete(t.nodes, node)
}

// watch feeds the node's share into its record, subscribing again if the record and the
// share ever disagree, until ctx ends or the source stops.
func (t *Tracker) watch(ctx context.Context, src stream.Source, node string) {
	logger := log.WithField("node", node).WithField("component", "realization")
	for ctx.Err() == nil {
		share, deltas, cancel, err := src.Watch(ctx, node)
		if err != nil {
			if ctx.Err() == nil {
				logger.WithError(err).Info("stopped following the node's policy share")
			}
			return
		}
		err = t.observe(node, share, deltas, ctx.Done())
		cancel()
		if err == nil {
			return // the source stopped, or ctx ended
		}
		logger.WithError(err).Warn("realization lost track of the node's share, subscribing again")
		select {
		case <-ctx.Done():
		case <-time.After(time.Second):
		}
	}
}

// observe takes a snapshot and the deltas after it; it returns nil when deltas closes or
// done does, and an error if a delta does not fit.
func (t *Tracker) observe(node string, share policy.NodeShare, deltas <-chan policy.Delta, done <-chan struct{}) error {
	if err := t.snapshot(node, share); err != nil {
		return err
	}
	for {
		select {
		case <-done:
			return nil
		case d, ok := <-deltas:
			if !ok {
				return nil
			}
			if err := t.delta(node, d); err != nil {
				return err
			}
		}
	}
}

// snapshot records a node's share as a change from what was known of it.
func (t *Tracker) snapshot(node string, share policy.NodeShare) error {
	share.AddressSets, share.AppliedToSets, share.Rules = maps.Clone(share.AddressSets), maps.Clone(share.AppliedToSets), maps.Clone(share.Rules)
	t.mu.Lock()
	r := t.record(node)
	if share.Generation < r.share.Generation {
		*r = *newNodeRecord(node) // a source that went back: start over
	}
	tc := r.replace(share)
	r.known = true
	// Policies the node could not say anything about before may be decided now.
	for key := range r.waiting {
		tc.policies[key] = struct{}{}
	}
	t.mu.Unlock()
	t.tell(tc)
	return nil
}

func (t *Tracker) delta(node string, d policy.Delta) error {
	t.mu.Lock()
	r := t.record(node)
	if t.sets.Len() >= maxSetMemo {
		t.sets.Reset()
	}
	tc, err := r.apply(d, t.sets)
	if err != nil {
		r.known = false
	}
	t.mu.Unlock()
	t.tell(tc)
	return err
}

func (t *Tracker) tell(tc touched) {
	t.tellCluster(tc.cluster)
	if len(tc.policies)+len(tc.pods) == 0 {
		return
	}
	keys := make([]types.NamespacedName, 0, len(tc.policies))
	for k := range tc.policies {
		keys = append(keys, k)
	}
	t.changed(keys, tc.pods, "")
}

// onNode is what a policy expects on one node: its selected pods there, the directions
// it isolates, and the rules that must be present.
type onNode struct {
	key      types.NamespacedName
	uid      string
	pods     []policy.PodKey
	isolates [2]bool // ingress, egress
	rules    []string
}

// errNotReflected says a node's share does not show the policy yet.
var errNotReflected = errors.New("not in the node's share yet")

// verdict says whether the node enforces the policy, and which generation it needs.
// A policy not realized is remembered, so that the node's next report or share change
// brings it back.
func (t *Tracker) verdict(node string, p onNode) (bool, uint64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	r := t.record(node)
	need, err := r.need(p)
	if err != nil {
		r.waiting[p.key] = maxGeneration
		return false, 0
	}
	if r.realized >= need {
		delete(r.waiting, p.key)
		return true, need
	}
	r.waiting[p.key] = need
	return false, need
}

// need returns the generation a node must realize to enforce p.
func (r *nodeRecord) need(p onNode) (uint64, error) {
	if !r.known {
		return 0, errNotReflected
	}
	iso := r.share.Isolation
	need := r.removedGen[p.key]
	for _, pod := range p.pods {
		for dir, list := range [][]policy.PodKey{iso.Ingress, iso.Egress} {
			if p.isolates[dir] && !isolated(list, pod) {
				return 0, errNotReflected
			}
		}
		need = max(need, r.isoGen[podNameOf(pod)])
	}
	for _, id := range p.rules {
		if rule, ok := r.share.Rules[id]; !ok || (p.uid != "" && rule.Policy.UID != "" && rule.Policy.UID != p.uid) {
			return 0, errNotReflected
		}
	}
	for id := range r.rules[p.key] {
		rule := r.share.Rules[id]
		need = max(need, r.ruleGen[id], r.toGen[rule.AppliedTo])
		for _, peer := range rule.Peers {
			need = max(need, r.addrGen[peer])
		}
	}
	return need, nil
}

// isolated reports whether list (sorted) holds the pod, by namespace and name and, when
// both know it, UID.
func isolated(list []policy.PodKey, pod policy.PodKey) bool {
	for _, k := range list {
		if k.Namespace == pod.Namespace && k.Name == pod.Name {
			return k.UID == "" || pod.UID == "" || k.UID == pod.UID
		}
	}
	return false
}

// forgetPolicy drops a deleted policy from every node's waiting list.
func (t *Tracker) forgetPolicy(key types.NamespacedName) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, r := range t.nodes {
		delete(r.waiting, key)
		delete(r.removedGen, key)
	}
}
