package pipeline

import (
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"testing"

	"github.com/kovs-net/kovs/go-controller/pkg/policy"
)

// transportPacket is a first packet of proto to dst port from src, TTL 64.
func transportPacket(inPort uint32, src, dst netip.Addr, proto uint8, port uint16) Packet {
	p := Packet{InPort: inPort, EthType: EthTypeIPv4, IPSrc: src, IPDst: dst, IPProto: proto, TTL: 64,
		SrcPort: 40000, DstPort: port}
	if src.Is6() {
		p.EthType = EthTypeIPv6
	}
	return p
}

// fromLocal is what local pod sends to dst (through node-1's gateway).
func fromLocal(t *testing.T, pod PodPort, dst netip.Addr, proto uint8, port uint16) Packet {
	p := transportPacket(pod.OFPort, podIP(t, pod, dst.Is6()), dst, proto, port)
	p.EthSrc, p.EthDst = pod.MAC, gwMAC(1)
	return p
}

// fromRemote is what node-1 receives from node peer's tunnel, sent by src to dst.
func fromRemote(peer int, src, dst netip.Addr, proto uint8, port uint16) Packet {
	p := transportPacket(tunnelPort, src, dst, proto, port)
	p.EthSrc, p.EthDst, p.TTL = gwMAC(peer), gwMAC(1), 63
	p.TunID, p.TunSrc = TunnelVNI, underlayIP(peer, tunnelFamily6(1, peer))
	return p
}

// arriving is a packet from src to a local pod as node-1 gets it: through the tunnel from
// the peer whose pod subnet holds src (node n has 10.244.n.0/24 and fd00:10:244:n::/64),
// else from its host, which forwarded it (its classifier admits nothing else from the
// tunnel).
func arriving(src netip.Addr, pod PodPort, dst netip.Addr, proto uint8, port uint16) Packet {
	for _, peer := range []int{2, 3} {
		if netip.MustParsePrefix(fmt.Sprintf("10.244.%d.0/24", peer)).Contains(src) ||
			netip.MustParsePrefix(fmt.Sprintf("fd00:10:244:%d::/64", peer)).Contains(src) {
			return fromRemote(peer, src, dst, proto, port)
		}
	}
	p := fromNode(src, pod, dst, port)
	p.IPProto = proto
	return p
}

// fromNode is what node-1's host sends to a local pod through the gateway port.
func fromNode(src netip.Addr, pod PodPort, dst netip.Addr, port uint16) Packet {
	p := transportPacket(gatewayPort, src, dst, IPProtoTCP, port)
	p.EthSrc, p.EthDst = gwMAC(1), pod.MAC
	return p
}

// policyVerdict says whether the traced packet passed NetworkPolicy: it was delivered,
// or dropped in a policy table (anything else is a failure of the test's premise).
func policyVerdict(t *testing.T, r Result) bool {
	t.Helper()
	if len(r.Outputs) == 1 {
		return true
	}
	last := r.Steps[len(r.Steps)-1]
	if !r.Dropped() || (last.Table != EgressPolicy && last.Table != IngressPolicy) {
		t.Fatalf("packet neither delivered nor dropped by policy:\n%s", r)
	}
	return false
}

// allowingRules names the rules a trace shows allowing the packet: every conjunction that
// completed in a policy table, and the rule of a single-clause allow flow.
func allowingRules(share policy.NodeShare, r Result) []string {
	byConj := map[uint32]string{}
	for id, conj := range conjunctionIDs(share.Rules) {
		byConj[conj] = id
	}
	var ids []string
	for _, s := range r.Steps {
		if s.Table != EgressPolicy && s.Table != IngressPolicy {
			continue
		}
		for _, c := range s.Conjunctions {
			ids = append(ids, byConj[c])
		}
		if len(s.Conjunctions) == 0 && s.Flow.Cookie.PolicyKind() == PolicyKindRule {
			for _, id := range slices.Sorted(maps.Keys(share.Rules)) {
				if PolicyRuleObjectID(id) == s.Flow.Cookie.Object() {
					ids = append(ids, id)
				}
			}
		}
	}
	slices.Sort(ids)
	return ids
}

// denyingFlow is the policy flow that dropped the packet: its kind and ofport.
func denyingFlow(r Result) (PolicyKind, uint32) {
	c := r.Steps[len(r.Steps)-1].Flow.Cookie
	return c.PolicyKind(), c.Object()
}
