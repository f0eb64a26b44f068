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
	m.useNamedPortBase(ps, ps.appliedTo)
	for _, number := range m.resolvedOver(ps, ps.appliedTo, np) {
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
	bases := make([]*group, len(podPeers))
	var numbers []int32
	for i, spec := range podPeers {
		bases[i] = m.groups[spec.key()]
		m.useNamedPortBase(ps, bases[i])
		numbers = append(numbers, m.resolvedOver(ps, bases[i], np)...)
	}
	slices.Sort(numbers)
	for _, number := range slices.Compact(numbers) {
		var sets []*addrSet
		for i, spec := range podPeers {
			if slices.Contains(m.resolvedNumbers(bases[i], np), number) {
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

// useNamedPortBase records that ps splits named ports over g, so that ps is compiled
// again when g's members change.
func (m *model) useNamedPortBase(ps *policyState, g *group) {
	if g.namedPortUsers == nil {
		g.namedPortUsers = map[*policyState]struct{}{}
	}
	g.namedPortUsers[ps] = struct{}{}
	ps.namedPortBases = append(ps.namedPortBases, g)
}

// resolvedOver returns resolvedNumbers(g, np) and records that ps was compiled with them.
func (m *model) resolvedOver(ps *policyState, g *group, np namedPorts) []int32 {
	numbers := m.resolvedNumbers(g, np)
	ps.portUses = append(ps.portUses, portUse{base: g, ports: np, numbers: numbers})
	return numbers
}

// resolvesAsCompiled reports whether ps's named ports resolve as they did when it was
// compiled, over every base.
func (m *model) resolvesAsCompiled(ps *policyState) bool {
	for _, u := range ps.portUses {
		if !slices.Equal(m.resolvedNumbers(u.base, u.ports), u.numbers) {
			return false
		}
	}
	return true
}

// resolvedNumbers returns the numbers g's members give the named ports, sorted.
func (m *model) resolvedNumbers(g *group, np namedPorts) []int32 {
	key := string(np.protocol) + ":" + strings.Join(np.names, ",")
	if numbers, ok := g.resolved[key]; ok {
		return numbers
	}
	var numbers []int32
	g.members.each(func(p *pod) { numbers = p.appendResolved(numbers, np.protocol, np.names) })
	slices.Sort(numbers)
	numbers = slices.Compact(numbers)
	if g.resolved == nil {
		g.resolved = map[string][]int32{}
	}
	g.resolved[key] = numbers
	return numbers
}
