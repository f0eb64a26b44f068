package pipeline

import (
	"fmt"
	"slices"
	"testing"

	"github.com/kovs-net/kovs/go-controller/pkg/policy"
)

// policySet is a flow-count case: K policies, each with one ingress and one egress rule,
// all applied to the same A local pods (isolated both ways), all with the same P peer
// addresses and the same R TCP ports.
type policySet struct{ a, p, r, k int }

// share builds the case for node f.node() with local pods f.pods(a).
func (c policySet) share(f flowFamilies) (policy.NodeShare, []PodPort) {
	pods := f.pods(c.a)
	s := policy.NewNodeShare("node-0")
	applied := policy.AppliedToSet{ID: "g-selected"}
	for i := range pods {
		pods[i].UID = fmt.Sprint("uid-", i)
		k := policy.PodKey{Namespace: pods[i].Namespace, Name: pods[i].Name, UID: pods[i].UID}
		applied.Pods = append(applied.Pods, policy.AppliedPod{PodKey: k, IPs: pods[i].IPs})
		s.Isolation.Ingress = append(s.Isolation.Ingress, k)
		s.Isolation.Egress = append(s.Isolation.Egress, k)
		s.Pods = append(s.Pods, k)
	}
	s.AppliedToSets[applied.ID] = applied
	peers := policy.AddressSet{ID: "s-peers"}
	for i := range c.p { // alternating families on a dual-stack node
		v6 := f.ipv6 && (!f.ipv4 || i%2 == 1)
		peers.Addresses = append(peers.Addresses, policy.HostPrefix(nthHost(block(1, v6), 10+i)))
	}
	peers.Addresses = policy.SortPrefixes(peers.Addresses)
	s.AddressSets[peers.ID] = peers
	var ports []policy.Port
	for i := range c.r {
		ports = append(ports, policy.Port{Protocol: policy.TCP, Port: int32(1000 + i)})
	}
	for i := range c.k {
		for _, dir := range []policy.Direction{policy.Ingress, policy.Egress} {
			id := fmt.Sprintf("ns/np-%d/%s/0", i, dir)
			s.Rules[id] = policy.Rule{ID: id, Direction: dir, AppliedTo: applied.ID, Peers: []string{peers.ID},
				Ports: ports, Action: policy.ActionAllow}
		}
	}
	for _, l := range [][]policy.PodKey{s.Isolation.Ingress, s.Isolation.Egress, s.Pods} {
		slices.SortFunc(l, policy.PodKey.Compare)
	}
	slices.SortFunc(applied.Pods, func(x, y policy.AppliedPod) int { return x.PodKey.Compare(y.PodKey) })
	return s, pods
}

// want is the number of policy flows: per direction, one clause flow per pod, per peer
// address and per port and family (each carrying the K rules' conjunctions), one conj_id
// flow per rule, and a default deny per pod.
func (c policySet) want(families int) int {
	perDirection := c.a + c.p + c.r*families + c.k
	return 2*perDirection + 2*c.a
}

// TestPolicyFlowCountIsLinear: flows = 2(A + P + R*families + K) + 2A, the sum of the
// selected pods, peer addresses and ports, never their product.
func TestPolicyFlowCountIsLinear(t *testing.T) {
	for _, f := range []flowFamilies{familyIPv4, familyDual} {
		families := 1
		if f.ipv4 && f.ipv6 {
			families = 2
		}
		b, err := NewBuilder(f.node(), testRound)
		if err != nil {
			t.Fatal(err)
		}
		for _, a := range []int{1, 5, 40} {
			for _, p := range []int{1, 7, 100} {
				for _, r := range []int{1, 3, 20} {
					for _, k := range []int{1, 4} {
						c := policySet{a: a, p: p, r: r, k: k}
						share, pods := c.share(f)
						if err := share.Validate(); err != nil {
							t.Fatal(err)
						}
						if got := len(b.PolicyFlows(share, pods)); got != c.want(families) {
							t.Errorf("%s: A=%d P=%d R=%d K=%d: %d flows, want 2(A+P+R*%d+K)+2A = %d (A*P*R would be %d)",
								f.name, a, p, r, k, got, families, c.want(families), a*p*r)
						}
					}
				}
			}
		}
	}
}

// BenchmarkPolicyFlows compiles the policy flows of 1,000 policies over 1,000 local pods
// (each policy selecting all of them, 100 peers, 5 ports), what the agent computes on
// every sync of such a node.
func BenchmarkPolicyFlows(b *testing.B) {
	f := familyIPv4
	builder, err := NewBuilder(f.node(), testRound)
	if err != nil {
		b.Fatal(err)
	}
	share, pods := policySet{a: 1000, p: 100, r: 5, k: 1000}.share(f)
	var n int
	for b.Loop() {
		n = len(builder.PolicyFlows(share, pods))
	}
	b.ReportMetric(float64(n), "flows")
}
