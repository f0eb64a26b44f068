package networkpolicy

import (
	"errors"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	log "github.com/sirupsen/logrus"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/kovs-net/kovs/go-controller/pkg/policy"
)

var errEmptyPeer = errors.New("peer has no podSelector, namespaceSelector or ipBlock")

// namedPorts are the port names of a rule for one protocol, sorted.
type namedPorts struct {
	protocol policy.Protocol
	names    []string
}

// splitPorts separates a rule's ports into numeric ports (and ranges, and whole
// protocols) and named ports grouped by protocol. Entries the API server would reject
// (unknown protocol, port 0, endPort before port) are dropped, so they allow nothing.
func splitPorts(ports []networkingv1.NetworkPolicyPort, logger func() *log.Entry) ([]policy.Port, []namedPorts) {
	if len(ports) == 0 {
		return nil, nil
	}
	var numeric []policy.Port
	byProto := map[policy.Protocol][]string{}
	for _, p := range ports {
		proto := policy.TCP
		if p.Protocol != nil {
			proto = policy.Protocol(*p.Protocol)
		}
		if proto != policy.TCP && proto != policy.UDP && proto != policy.SCTP {
			logger().WithField("protocol", proto).Warn("ignoring port of unknown protocol")
			continue
		}
		switch {
		case p.Port == nil:
			numeric = append(numeric, policy.Port{Protocol: proto})
		case p.Port.Type == intstr.String:
			byProto[proto] = append(byProto[proto], p.Port.StrVal)
		case p.Port.IntVal < 1 || p.Port.IntVal > 65535 || (p.EndPort != nil && *p.EndPort < p.Port.IntVal):
			logger().WithField("port", p.Port.String()).Warn("ignoring invalid port")
		default:
			port := policy.Port{Protocol: proto, Port: p.Port.IntVal}
			if p.EndPort != nil && *p.EndPort > p.Port.IntVal {
				port.EndPort = min(*p.EndPort, 65535)
			}
			numeric = append(numeric, port)
		}
	}
	var named []namedPorts
	for _, proto := range []policy.Protocol{policy.TCP, policy.UDP, policy.SCTP} {
		if names := byProto[proto]; len(names) > 0 {
			slices.Sort(names)
			named = append(named, namedPorts{protocol: proto, names: slices.Compact(names)})
		}
	}
	return dedupePorts(numeric), named
}

func dedupePorts(ports []policy.Port) []policy.Port {
	var out []policy.Port
	for _, p := range ports {
		if !slices.Contains(out, p) {
			out = append(out, p)
		}
	}
	return out
}

// splitIngress compiles the named ports of an ingress rule. The destinations are the
// applied-to pods, and a name can mean a different number on each: the rule becomes one
// rule per number, applied to the pods that resolve a name to that number.
func (m *model) splitIngress(ps *policyState, base policy.Rule, np namedPorts, sets []*addrSet) {
	for _, number := range resolvedOver(ps, ps.appliedTo, np) {
		g := m.acquire(ps, ps.appliedTo.groupSpec.withPorts(np.protocol, np.names, number))
		m.addRule(ps, splitRule(base, np.protocol, number), g, sets, []policy.Port{{Protocol: np.protocol, Port: number}})
	}
}

// splitEgress compiles the named ports of an egress rule. The destinations are the
// peers, and a name means what the destination pod's container ports say, whatever the
// kind of peer that matches it (as the API and the upstream implementations read it:
// kube-network-policies' evaluatePorts takes the destination pod). Each peer's pods are
// split by the number they resolve a name to, and the rule becomes one rule per number
// over those pods. The ipBlock peers (blocks, their addresses together) count as one
// more peer: the pods of the cluster with an address in them, whose addresses in them
// are the set's. An address that is no pod resolves no name. A rule without peers
// resolves names over every pod of the cluster.
func (m *model) splitEgress(ps *policyState, base policy.Rule, np namedPorts, podPeers []groupSpec, blocks []netip.Prefix, anyPeer bool) {
	switch {
	case anyPeer:
		podPeers = []groupSpec{allPods()}
		m.acquire(ps, podPeers[0])
	case len(blocks) > 0:
		spec := allPods().withinPrefixes(blocks)
		podPeers = append(slices.Clip(podPeers), spec)
		m.acquire(ps, spec)
	}
	resolved := make([][]int32, len(podPeers)) // per peer
	var numbers []int32
	for i, spec := range podPeers {
		resolved[i] = resolvedOver(ps, m.groups[spec.key()], np)
		numbers = append(numbers, resolved[i]...)
	}
	slices.Sort(numbers)
	for _, number := range slices.Compact(numbers) {
		var sets []*addrSet
		for i, spec := range podPeers {
			if slices.Contains(resolved[i], number) {
				sets = append(sets, m.peerSet(m.acquire(ps, spec.withPorts(np.protocol, np.names, number))))
			}
		}
		slices.SortFunc(sets, func(a, b *addrSet) int { return strings.Compare(a.id, b.id) })
		m.addRule(ps, splitRule(base, np.protocol, number), ps.appliedTo, slices.Compact(sets),
			[]policy.Port{{Protocol: np.protocol, Port: number}})
	}
}

func splitRule(base policy.Rule, protocol policy.Protocol, number int32) policy.Rule {
	base.ID += "/" + strings.ToLower(string(protocol)) + "-" + strconv.Itoa(int(number))
	return base
}

// resolvedOver returns the numbers g's members give the named ports, sorted, and records
// that ps was compiled with them: ps is compiled again at the end of a batch in which a
// number appeared or disappeared (portCount).
func resolvedOver(ps *policyState, g *group, np namedPorts) []int32 {
	pc := g.portCount(np)
	pc.users[ps] = struct{}{}
	numbers := pc.sorted()
	ps.portUses = append(ps.portUses, portUse{count: pc, numbers: numbers})
	return numbers
}

// resolvesAsCompiled reports whether ps's named ports resolve as they did when it was
// compiled, over every base.
func (ps *policyState) resolvesAsCompiled() bool {
	for _, u := range ps.portUses {
		if !slices.Equal(u.count.sorted(), u.numbers) {
			return false
		}
	}
	return true
}

// portCount returns g's count of the numbers its members give the named ports, counting
// them over the members the first time they are asked for.
func (g *group) portCount(np namedPorts) *portCount {
	key := string(np.protocol) + ":" + strings.Join(np.names, ",")
	if pc := g.portCounts[key]; pc != nil {
		return pc
	}
	pc := &portCount{base: g, key: key, ports: np, count: map[int32]int32{}, users: map[*policyState]struct{}{}}
	g.members.each(func(p *pod) { pc.add(p, 1) })
	if g.portCounts == nil {
		g.portCounts = map[string]*portCount{}
	}
	g.portCounts[key] = pc
	return pc
}

// countPorts counts (delta 1) or uncounts (-1) the numbers member p gives the named ports
// counted over g, and marks the policies compiled with those numbers to be compiled
// again when a number appears or disappears.
func (m *model) countPorts(g *group, p *pod, delta int32) {
	for _, pc := range g.portCounts {
		if pc.add(p, delta) {
			for ps := range pc.users {
				m.batch.dirtyPolicies[ps] = struct{}{}
			}
		}
	}
}

// add counts (delta 1) or uncounts (-1) the numbers p gives the named ports and reports
// whether one appeared or disappeared.
func (pc *portCount) add(p *pod, delta int32) (changed bool) {
	for _, port := range p.ports {
		if port.protocol != pc.ports.protocol || !slices.Contains(pc.ports.names, port.name) {
			continue
		}
		c := pc.count[port.number] + delta
		if c == 0 {
			delete(pc.count, port.number)
		} else {
			pc.count[port.number] = c
		}
		changed = changed || c == 0 || (c == 1 && delta > 0)
	}
	pc.stale = pc.stale || changed
	return changed
}

// sorted returns the numbers counted, sorted: a new slice when they changed since the
// last call, never modified afterwards.
func (pc *portCount) sorted() []int32 {
	if pc.stale || pc.numbers == nil {
		numbers := make([]int32, 0, len(pc.count))
		for number := range pc.count {
			numbers = append(numbers, number)
		}
		slices.Sort(numbers)
		pc.numbers, pc.stale = numbers, false
	}
	return pc.numbers
}

// release forgets that ps was compiled with the count, and the count itself once no
// policy is.
func (pc *portCount) release(ps *policyState) {
	delete(pc.users, ps)
	if len(pc.users) == 0 && pc.base.portCounts[pc.key] == pc {
		delete(pc.base.portCounts, pc.key)
	}
}
