package networkpolicy

import (
	"net/netip"
	"sync"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"

	"github.com/kovs-net/kovs/go-controller/pkg/policy"
)

// namespace is a namespace as the model sees it: its labels and its selectable pods.
type namespace struct {
	name   string
	labels labels.Set
	// known is set once the Namespace object has been seen; a namespace referenced only
	// by pods so far has no labels.
	known bool
	pods  map[*pod]struct{}
}

// pod is a selectable pod: not hostNetwork and not terminated.
type pod struct {
	key    types.NamespacedName
	ns     *namespace
	uid    string
	labels labels.Set
	// node is nil while the pod is not scheduled.
	node  *node
	ips   []netip.Addr
	ports []namedPort
	// groups are the groups the pod is a member of.
	groups []*group
	// isolating counts, per direction, the member groups that isolate their pods.
	isolating [2]int32
	// listed: its node's share lists it (it has been evaluated, by the ClusterNetworkPolicy
	// feed too when there is one, so the agent may open it). Once listed it stays listed
	// until it is removed.
	listed bool
}

// namedPort is a named container port of a pod.
type namedPort struct {
	name     string
	protocol policy.Protocol
	number   int32
}

// group is a set of pods defined by selectors: the applied-to pods of a policy (its
// namespace and podSelector), or the pods of a peer (a namespace, or a namespaceSelector,
// and a podSelector). Every policy and peer with the same selectors shares one group.
type group struct {
	groupSpec
	id string

	refs    int
	members memberSet
	// rules are the attached rules that apply to this group's pods.
	rules []*rule
	// ruleMap caches rules by ID for snapshots when the group has many (see
	// cloneRulesMin); attachRule and detachRule drop it. Snapshots share or clone it: it
	// is never modified once built. Only holders of the write lock build it (Watch).
	ruleMap map[string]policy.Rule
	// addrRefs counts, per address set, the attached rules that reference it. A group's
	// rules reference few distinct sets: a slice is smaller than a map.
	addrRefs []addrRef
	// isolating counts, per direction, the policies that isolate this group's pods.
	isolating [2]int32
	// addr is the group's address set, created the first time the group is a peer.
	addr *addrSet
	// portCounts count, per named ports that policies resolve over the group (by
	// protocol and names), the numbers its members give them.
	portCounts map[string]*portCount
	// changed is set when the membership changed in the current batch.
	changed bool
}

// portFilter keeps the pods that resolve one of names (of protocol) to number.
type portFilter struct {
	protocol policy.Protocol
	names    []string
	number   int32
}

// portCount counts the numbers a group's members give some named ports (a name can mean
// a different number on each pod), and lists the policies compiled with those numbers: a
// member's change that makes a number appear or disappear marks them to be compiled
// again at the end of the batch, and one that does not (most: a pod readdressed, a pod
// that serves the port as the others do) costs the count alone, however many members
// and policies the group has. A pod's container ports never change while it keeps its
// UID, so a member's numbers change only as it joins or leaves.
type portCount struct {
	base  *group
	key   string // in base.portCounts
	ports namedPorts
	// count counts, per number, the members' ports that give it (a pod can give one
	// number under two names).
	count map[int32]int32
	// numbers are count's numbers, sorted, unless stale: rebuilt by sorted as a new
	// slice, since policies keep the ones they were compiled with.
	numbers []int32
	stale   bool
	users   map[*policyState]struct{}
}

// addrSet is an address set: the addresses of a group's pods, or an ipBlock's CIDRs.
type addrSet struct {
	id    string
	key   string // an ipBlock's content key
	group *group // nil for an ipBlock
	// addrs is sorted and never modified in place: a change replaces the slice. A group's
	// set of countedMin addresses or more keeps it only while it is needed whole (list):
	// its members' changes count their addresses in count and leave addrs stale, and the
	// batch's changes are patched to the nodes from diff, so that a change of a few
	// members never rebuilds nor sorts the whole list.
	addrs []netip.Prefix
	stale bool
	// mu guards rebuilding addrs, which readers of the model (holding its read lock) may
	// do at once.
	mu sync.Mutex
	// count counts, per address, the members that have it (a group's set that counts).
	count map[netip.Prefix]int32
	// diff are the addresses that appeared (+1) and disappeared (-1) in this batch.
	diff map[netip.Prefix]int8
	// refs counts the policies holding an ipBlock set.
	refs int
	// holders are the nodes whose share holds the set (node.addrRefs counts their
	// references): a change of its addresses patches those, not every node.
	holders map[*node]struct{}
}

// addrRef counts references to an address set.
type addrRef struct {
	set   *addrSet
	count int
}

// rule is a compiled rule attached to its applied-to group.
type rule struct {
	api       policy.Rule
	appliedTo *group
	peers     []*addrSet
	// slot is the rule's index in appliedTo.rules while attached.
	slot int
}

// policyState is a compiled NetworkPolicy and the references it holds.
type policyState struct {
	key       types.NamespacedName
	np        *networkingv1.NetworkPolicy
	appliedTo *group
	isolates  [2]bool // by ingress, egress
	rules     []*rule
	// groups and blocks are the references the policy holds, one per acquisition.
	groups []*group
	blocks []*addrSet
	// portUses are the numbers the named ports resolved to over each base group when the
	// policy was compiled: while they resolve the same, compiling it again would give
	// the same rules.
	portUses []portUse
}

// portUse is what named ports resolved to over a base group at compile time.
type portUse struct {
	count   *portCount
	numbers []int32 // count.sorted()'s slice, never modified
}

// node is one node's share, kept as references into the shared state.
type node struct {
	name string
	// groups are the groups with rules that have members on the node.
	groups map[*group]struct{}
	// addrRefs counts, per address set, the groups of the node that reference it.
	addrRefs map[*addrSet]int
	pods     map[*pod]struct{}
	subs     []*subscriber
	// generation is the generation at which the node's share last changed (or the model's
	// when the node appeared). Snapshots and deltas carry it, not the model's generation:
	// subscribers that hold the same share are then at the same generation, however they
	// folded the batches in between, which is what the realization tracker relies on when
	// it asks an agent for the generation at which it saw a change.
	generation uint64
	// cluster are the node's ClusterNetworkPolicy rules (SetClusterRules).
	cluster []policy.ClusterRule
}

// Per-direction arrays are indexed by these.
const (
	ingress = 0
	egress  = 1
)

// podKey returns the key of a Pod object.
func podKey(p *corev1.Pod) types.NamespacedName {
	return types.NamespacedName{Namespace: p.Namespace, Name: p.Name}
}
