package networkpolicy

import (
	"net/netip"
	"slices"
	"strconv"
	"strings"

	log "github.com/sirupsen/logrus"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"

	"github.com/kovs-net/kovs/go-controller/pkg/policy"
)

// compilePolicy compiles a NetworkPolicy into rules over groups, acquiring the groups
// and ipBlock sets it references. Rules of a direction the policy's policyTypes do not
// name are ignored, as the API defines (and as the other implementations do).
func (m *model) compilePolicy(key types.NamespacedName, np *networkingv1.NetworkPolicy) *policyState {
	ps := &policyState{key: key, np: np}
	sel, selKey, err := m.selectors.parse(&np.Spec.PodSelector)
	if err != nil {
		log.WithError(err).WithField("policy", key.String()).Warn("policy selects no pods: invalid podSelector")
		return ps
	}
	ps.appliedTo = m.acquire(ps, groupSpec{scope: key.Namespace, selector: sel, podKey: selKey})
	ps.isolates = policyTypes(np)
	ref := policy.PolicyRef{Namespace: np.Namespace, Name: np.Name, UID: string(np.UID)}
	if ps.isolates[ingress] {
		for i, r := range np.Spec.Ingress {
			m.compileRule(ps, ref, policy.Ingress, i, r.Ports, r.From)
		}
	}
	if ps.isolates[egress] {
		for i, r := range np.Spec.Egress {
			m.compileRule(ps, ref, policy.Egress, i, r.Ports, r.To)
		}
	}
	return ps
}

// policyTypes returns the directions the policy isolates, defaulted as the API server
// does: Ingress always, Egress when the policy has egress rules.
func policyTypes(np *networkingv1.NetworkPolicy) [2]bool {
	if len(np.Spec.PolicyTypes) == 0 {
		return [2]bool{true, len(np.Spec.Egress) > 0}
	}
	var t [2]bool
	for _, pt := range np.Spec.PolicyTypes {
		switch pt {
		case networkingv1.PolicyTypeIngress:
			t[ingress] = true
		case networkingv1.PolicyTypeEgress:
			t[egress] = true
		}
	}
	return t
}

// compileRule compiles one rule: numeric ports (or no ports) in one rule over all the
// applied-to pods and peers, and each named port split by the number it resolves to on
// the destination pods (see splitIngress and splitEgress).
func (m *model) compileRule(ps *policyState, ref policy.PolicyRef, dir policy.Direction, index int,
	ports []networkingv1.NetworkPolicyPort, peers []networkingv1.NetworkPolicyPeer) {
	logger := func() *log.Entry {
		return log.WithFields(log.Fields{"policy": ps.key.String(), "direction": dir, "rule": index})
	}
	base := policy.Rule{ID: ruleID(ps.key, dir, index), Policy: ref, RuleIndex: index, Direction: dir, Action: policy.ActionAllow}
	numeric, named := splitPorts(ports, logger)
	sets, podPeers, blocks := m.compilePeers(ps, peers, logger)
	if len(ports) == 0 || len(numeric) > 0 {
		m.addRule(ps, base, ps.appliedTo, sets, numeric)
	}
	for _, np := range named {
		if dir == policy.Ingress {
			m.splitIngress(ps, base, np, sets)
		} else {
			m.splitEgress(ps, base, np, podPeers, blocks, len(peers) == 0)
		}
	}
}

func ruleID(key types.NamespacedName, dir policy.Direction, index int) string {
	return key.Namespace + "/" + key.Name + "/" + strings.ToLower(string(dir)) + "/" + strconv.Itoa(index)
}

// addRule adds a rule to ps; nil sets means any peer.
func (m *model) addRule(ps *policyState, tmpl policy.Rule, appliedTo *group, sets []*addrSet, ports []policy.Port) {
	r := &rule{api: tmpl, appliedTo: appliedTo, peers: sets}
	r.api.AppliedTo = appliedTo.id
	r.api.Ports = ports
	for _, a := range sets {
		r.api.Peers = append(r.api.Peers, a.id)
	}
	ps.rules = append(ps.rules, r)
}

// compilePeers returns the address sets of a rule's peers (nil: any peer), sorted by ID
// and without duplicates, the specs of the peers that select pods, and the addresses of
// its ipBlock peers together, sorted and without duplicates. A peer that cannot be
// compiled (the API server rejects them) becomes an empty set: the rule still matches
// nothing through it rather than everything.
func (m *model) compilePeers(ps *policyState, peers []networkingv1.NetworkPolicyPeer, logger func() *log.Entry) ([]*addrSet, []groupSpec, []netip.Prefix) {
	var sets []*addrSet
	var podPeers []groupSpec
	var blocks []netip.Prefix
	for i := range peers {
		peer := &peers[i]
		if peer.IPBlock != nil {
			prefixes, err := ipBlockPrefixes(peer.IPBlock)
			if err != nil {
				logger().WithError(err).Warn("ipBlock peer matches nothing")
			}
			sets = append(sets, m.acquireBlock(ps, prefixes))
			blocks = append(blocks, prefixes...)
			continue
		}
		spec, err := m.peerSpec(ps.key.Namespace, peer)
		if err != nil {
			logger().WithError(err).Warn("peer matches nothing")
			sets = append(sets, m.acquireBlock(ps, nil))
			continue
		}
		sets = append(sets, m.peerSet(m.acquire(ps, spec)))
		podPeers = append(podPeers, spec)
	}
	slices.SortFunc(sets, func(a, b *addrSet) int { return strings.Compare(a.id, b.id) })
	return slices.Compact(sets), podPeers, slices.Compact(policy.SortPrefixes(blocks))
}

// peerSpec returns the group of a pod-selecting peer: podSelector alone selects in the
// policy's namespace; namespaceSelector selects all the pods of the namespaces it
// matches, or (with a podSelector) the matching pods in them.
func (m *model) peerSpec(policyNamespace string, peer *networkingv1.NetworkPolicyPeer) (groupSpec, error) {
	if peer.PodSelector == nil && peer.NamespaceSelector == nil {
		return groupSpec{}, errEmptyPeer
	}
	sel, podKey, err := m.selectors.parse(peer.PodSelector)
	if err != nil {
		return groupSpec{}, err
	}
	if peer.NamespaceSelector == nil {
		return groupSpec{scope: policyNamespace, selector: sel, podKey: podKey}, nil
	}
	nsSel, nsKey, err := m.selectors.parse(peer.NamespaceSelector)
	if err != nil {
		return groupSpec{}, err
	}
	return groupSpec{nsSelector: nsSel, nsKey: nsKey, selector: sel, podKey: podKey}, nil
}

// allPods is the spec of every selectable pod of the cluster.
func allPods() groupSpec {
	return groupSpec{nsSelector: labels.Everything(), selector: labels.Everything()}
}

// acquireBlock returns the address set of an ipBlock's prefixes, shared by content.
func (m *model) acquireBlock(ps *policyState, prefixes []netip.Prefix) *addrSet {
	key := ipBlockKey(prefixes)
	b, ok := m.blocks[key]
	if !ok {
		b = &addrSet{id: setID("b-", key), key: key, addrs: prefixes}
		m.blocks[key] = b
	}
	b.refs++
	ps.blocks = append(ps.blocks, b)
	return b
}
