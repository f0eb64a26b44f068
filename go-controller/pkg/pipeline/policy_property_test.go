package pipeline

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"slices"
	"testing"

	"github.com/kovs-net/kovs/go-controller/pkg/policy"
)

// TestPolicyTracerAgreesWithReference compiles random shares for node-1 and traces random
// first packets through them: ingress from the tunnel to a local pod, egress from a local
// pod to anywhere. The shares hold NetworkPolicy rules and isolation, and
// ClusterNetworkPolicy rules of both tiers and every action. The verdict of the policy
// tables must be the reference meaning of the share (policy.NodeShare.Decide: Admin,
// NetworkPolicy, Baseline), except for a pod the share does not list yet, which must be
// denied both ways. Seed -1 is the golden scenario's own
// share. With KOVS_TRACE_CORPUS set, every trace is recorded for the comparison with
// ovs-vswitchd in pkg/ovs/integration (trace_corpus_test.go).
func TestPolicyTracerAgreesWithReference(t *testing.T) {
	seeds := 200
	if testing.Short() {
		seeds = 40
	}
	corpus := openTraceCorpus(t)
	var st verdictStats
	for seed := -1; seed < seeds; seed++ {
		g := &shareGen{rng: rand.New(rand.NewPCG(uint64(seed), 3)), stats: &st, corpus: corpus}
		share, pods := policyShare(), policyPods()
		if seed >= 0 {
			share, pods = g.share()
		}
		if err := share.Validate(); err != nil {
			t.Fatalf("seed %d: generated share: %v", seed, err)
		}
		sc := policyScenario()
		sc.pods, sc.policy = pods, &share
		tr := sc.tracer(t)
		for i := range 60 {
			g.checkPacket(t, fmt.Sprintf("seed %d packet %d", seed, i), tr, share, pods)
		}
	}
	t.Logf("%+v", st)
	if st.allowed < st.packets/5 || st.denied < st.packets/5 || st.byConjunction < st.packets/20 || st.byClusterRule < st.packets/20 {
		t.Errorf("the random packets do not exercise the flows enough: %+v", st)
	}
}

// verdictStats counts what the random packets met.
type verdictStats struct{ packets, allowed, denied, byConjunction, byClusterRule int }

// shareGen draws random shares and packets for node-1 of the dual-stack cluster.
type shareGen struct {
	rng    *rand.Rand
	stats  *verdictStats
	corpus *traceCorpus // nil: traces are not recorded
}

func (g *shareGen) pick(n int) int { return g.rng.IntN(n) }

// pool are the addresses peers are made of and packets go between.
var pool = []string{
	"10.244.1.10", "10.244.1.11", "10.244.1.12", "10.244.2.10", "10.244.3.10", "10.9.9.9", "8.8.8.8", "192.168.1.5",
	"fd00:10:244:1::a", "fd00:10:244:1::b", "fd00:10:244:2::a", "fd00:10:244:3::a", "fd00:99::1", "2001:db8::5",
}

var cidrs = []string{"10.244.0.0/16", "10.244.2.0/24", "8.0.0.0/7", "0.0.0.0/0", "fd00:10:244::/48", "::/0", "fd00:99::/64"}

func (g *shareGen) share() (policy.NodeShare, []PodPort) {
	pods := make([]PodPort, 4)
	for i := range pods {
		pods[i] = policyPod([]string{"x", "y"}[i%2], fmt.Sprint("p", i), uint32(3+i), 10+i)
	}
	s := policy.NewNodeShare("node-1")
	for i := range 4 {
		s.AddressSets[fmt.Sprint("s", i)] = g.addressSet(fmt.Sprint("s", i))
	}
	for i := range 3 {
		set := policy.AppliedToSet{ID: fmt.Sprint("g", i)}
		for _, p := range pods {
			if g.pick(2) == 0 {
				set.Pods = append(set.Pods, refOf(p))
			}
		}
		slices.SortFunc(set.Pods, func(a, b policy.AppliedPod) int { return a.PodKey.Compare(b.PodKey) })
		s.AppliedToSets[set.ID] = set
	}
	for i := range 1 + g.pick(8) {
		r := g.rule(fmt.Sprint("ns/np/", i))
		s.Rules[r.ID] = r
	}
	for _, p := range pods {
		k := key(p.Namespace, p.Name)
		if g.pick(2) == 0 {
			s.Isolation.Ingress = append(s.Isolation.Ingress, k)
		}
		if g.pick(2) == 0 {
			s.Isolation.Egress = append(s.Isolation.Egress, k)
		}
		if g.pick(6) > 0 { // sometimes a pod is still pending
			s.Pods = append(s.Pods, k)
		}
	}
	// As in every share the controller sends: a rule's pods are isolated in its direction
	// (which decides whether Baseline rules see their traffic).
	for _, r := range s.Rules {
		list := &s.Isolation.Ingress
		if r.Direction == policy.Egress {
			list = &s.Isolation.Egress
		}
		for _, p := range s.AppliedToSets[r.AppliedTo].Pods {
			*list = append(*list, p.PodKey)
		}
	}
	s.Isolation.Ingress = slices.CompactFunc(slices.SortedFunc(slices.Values(s.Isolation.Ingress), policy.PodKey.Compare), keyEqual)
	s.Isolation.Egress = slices.CompactFunc(slices.SortedFunc(slices.Values(s.Isolation.Egress), policy.PodKey.Compare), keyEqual)
	slices.SortFunc(s.Pods, policy.PodKey.Compare)
	for i := range 1 + g.pick(6) {
		s.ClusterRules = append(s.ClusterRules, g.clusterRule(i, pods))
	}
	slices.SortFunc(s.ClusterRules, policy.CompareClusterRules)
	return s, pods
}

func keyEqual(a, b policy.PodKey) bool { return a == b }

// clusterRule is a random ClusterNetworkPolicy rule over the pods (its index i makes its
// ID unique).
func (g *shareGen) clusterRule(i int, pods []PodPort) policy.ClusterRule {
	dir := []policy.Direction{policy.Ingress, policy.Egress}[g.pick(2)]
	name := fmt.Sprint("cnp", g.pick(3))
	r := policy.ClusterRule{ID: fmt.Sprintf("%s/%s/%d", name, dir, i), Policy: name, Index: i,
		Tier: []policy.Tier{policy.TierAdmin, policy.TierBaseline}[g.pick(2)], Priority: int32(g.pick(3)), Direction: dir,
		Action: []policy.ClusterAction{policy.ClusterAccept, policy.ClusterDeny, policy.ClusterPass}[g.pick(3)]}
	for _, p := range pods {
		if g.pick(2) == 0 {
			r.Subjects = append(r.Subjects, key(p.Namespace, p.Name))
		}
	}
	slices.SortFunc(r.Subjects, policy.PodKey.Compare)
	if g.pick(4) == 0 {
		r.AnyPeer = true
	} else {
		r.Peers = g.addressSet("").Addresses
	}
	if g.pick(2) == 0 {
		for range 1 + g.pick(2) {
			r.Ports = append(r.Ports, g.port())
		}
	}
	return r
}

func (g *shareGen) addressSet(id string) policy.AddressSet {
	var addrs []netip.Prefix
	for range g.pick(4) {
		if g.pick(3) == 0 {
			addrs = append(addrs, cidr(cidrs[g.pick(len(cidrs))]))
		} else {
			addrs = append(addrs, host(ip(pool[g.pick(len(pool))])))
		}
	}
	if g.pick(5) == 0 { // an ipBlock with an exception
		addrs = append(addrs, policy.SubtractPrefixes(cidr("10.0.0.0/8"), []netip.Prefix{cidr("10.244.2.0/24")})...)
	}
	return policy.AddressSet{ID: id, Addresses: policy.SortPrefixes(addrs)}
}

func (g *shareGen) rule(id string) policy.Rule {
	r := policy.Rule{ID: id, Direction: policy.Ingress, AppliedTo: fmt.Sprint("g", g.pick(3)), Action: policy.ActionAllow}
	if g.pick(2) == 0 {
		r.Direction = policy.Egress
	}
	if g.pick(2) == 0 {
		for range 1 + g.pick(2) {
			r.Peers = append(r.Peers, fmt.Sprint("s", g.pick(4)))
		}
		slices.Sort(r.Peers)
		r.Peers = slices.Compact(r.Peers)
	}
	if g.pick(2) == 0 {
		for range 1 + g.pick(2) {
			r.Ports = append(r.Ports, g.port())
		}
	}
	return r
}

func (g *shareGen) port() policy.Port {
	p := policy.Port{Protocol: []policy.Protocol{policy.TCP, policy.UDP, policy.SCTP}[g.pick(3)]}
	switch g.pick(5) {
	case 0: // the whole protocol
	case 1, 2:
		p.Port = []int32{53, 80, 443, 8080}[g.pick(4)]
	default:
		p.Port = []int32{1000, 8000, 8079}[g.pick(3)]
		p.EndPort = p.Port + 1 + int32(g.pick(200))
	}
	return p
}

// checkPacket traces one random packet and compares the policy verdict.
func (g *shareGen) checkPacket(t *testing.T, what string, tr *Tracer, share policy.NodeShare, pods []PodPort) {
	t.Helper()
	pod := pods[g.pick(len(pods))]
	v6 := g.pick(2) == 0
	var remote netip.Addr
	for !remote.IsValid() || remote.Is6() != v6 {
		remote = ip(pool[g.pick(len(pool))])
	}
	protos := []uint8{IPProtoTCP, IPProtoUDP, IPProtoSCTP}
	names := map[uint8]policy.Protocol{IPProtoTCP: policy.TCP, IPProtoUDP: policy.UDP, IPProtoSCTP: policy.SCTP}
	proto := protos[g.pick(3)]
	port := []uint16{53, 80, 443, 1000, 1100, 8000, 8079, 8080, 8200, 9999, uint16(1 + g.pick(65535))}[g.pick(11)]
	k := key(pod.Namespace, pod.Name)
	pending := !share.HasPod(k)
	var pkt Packet
	var want policy.ClusterDecision
	tables := []Table{AdminIngressPolicy, IngressPolicy, BaselineIngressPolicy}
	if g.pick(2) == 0 {
		pkt = arriving(remote, pod, podIP(t, pod, v6), proto, port)
		want = share.Decide(policy.Ingress, k, remote, names[proto], int32(port))
	} else {
		// Only the source pod's egress policy counts: the packet may be for a local pod,
		// whose ingress policy comes next.
		tables = []Table{AdminEgressPolicy, EgressPolicy, BaselineEgressPolicy}
		pkt = fromLocal(t, pod, remote, proto, port)
		want = share.Decide(policy.Egress, k, remote, names[proto], int32(port))
	}
	if pending {
		want = policy.ClusterDecision{Tier: "pending"}
	}
	r := trace(t, tr, pkt, CTNew)
	g.corpus.record(t, what, tr, pkt, CTNew, r)
	got := !r.Dropped() || !slices.Contains(tables, r.Steps[len(r.Steps)-1].Table)
	if got != want.Allowed {
		t.Fatalf("%s: %s/%s proto %d port %d with %s (pending %v): allowed = %v, reference says %+v\nshare %+v\n%s",
			what, pod.Namespace, pod.Name, proto, port, remote, pending, got, want, share, r)
	}
	if want.Tier == "Admin" || want.Tier == "Baseline" {
		g.stats.byClusterRule++
	}
	g.count(r, got)
}

func (g *shareGen) count(r Result, allowed bool) {
	g.stats.packets++
	if allowed {
		g.stats.allowed++
	} else {
		g.stats.denied++
	}
	if slices.ContainsFunc(r.Steps, func(s Step) bool { return len(s.Conjunctions) > 0 }) {
		g.stats.byConjunction++
	}
}
