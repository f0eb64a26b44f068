package pipeline

import (
	"fmt"
	"net/netip"
	"testing"

	"github.com/kovs-net/kovs/go-controller/pkg/controller/clusterpolicy"
	"github.com/kovs-net/kovs/go-controller/pkg/controller/clusterpolicy/workload"
	"github.com/kovs-net/kovs/go-controller/pkg/policy"
)

// The cluster tiers' flows of a realistic cluster, end to end: the shared workload
// (package workload: 100 ClusterNetworkPolicies of both tiers over 1,000 pods on 100
// nodes, namespace and pod selectors, CIDR peers, ports and a port range), compiled by
// the controller's compiler (clusterpolicy.Compile, split by Rules.NodeRules as the Feed
// does), rendered by the agent's whole pipeline (Stages().Compile) for a node with its
// 10 pods and its 99 tunnel peers, and counted by cookie kind.

// clusterWorkload is the workload compiled into every node's cluster rules.
type clusterWorkload struct {
	nodes  int
	w      *workload.Cluster
	byNode map[string][]policy.ClusterRule
}

func newClusterWorkload(tb testing.TB, pods, policies int) clusterWorkload {
	tb.Helper()
	w, err := workload.New(pods, policies)
	if err != nil {
		tb.Fatal(err)
	}
	c, nodeOf := clusterpolicy.NewCluster(w.Namespaces, w.Pods, w.Nodes)
	return clusterWorkload{nodes: len(w.Nodes), w: w, byNode: clusterpolicy.Compile(w.Policies, c).NodeRules(func(k policy.PodKey) string { return nodeOf[k] })}
}

// snapshot is node k as its agent hands it to the stages: its pods on ofports 3, 4, ...,
// the other nodes as tunnel peers, and a share with its cluster rules (and no
// NetworkPolicy).
func (cw clusterWorkload) snapshot(k int) Snapshot {
	name := workload.NodeName(k)
	blk := workload.NodeBlock(k)
	node := NodeConfig{Name: name, GatewayMAC: indexMAC(0, k), PodSubnets: []netip.Prefix{blk},
		GatewayIPs: []netip.Addr{blk.Addr().Next()}, ClusterCIDRs: []netip.Prefix{cidr("10.0.0.0/8")},
		TunnelOFPort: tunnelPort, GatewayOFPort: gatewayPort, UnderlayIPs: []netip.Addr{netip.AddrFrom4([4]byte{172, 31, byte(k >> 8), byte(k)})}}
	share := policy.NewNodeShare(name)
	share.Generation = 1
	var pods []PodPort
	for _, p := range cw.w.Pods {
		if p.Spec.NodeName != name {
			continue
		}
		pp := PodPort{Namespace: p.Namespace, Name: p.Name, UID: string(p.UID), OFPort: uint32(len(pods) + 3),
			MAC: indexMAC(1, len(pods)), IPs: []netip.Addr{netip.MustParseAddr(p.Status.PodIP)}}
		pods = append(pods, pp)
		share.Pods = append(share.Pods, policy.PodKey{Namespace: p.Namespace, Name: p.Name, UID: string(p.UID)})
	}
	var peers []TunnelPeer
	for j := range cw.nodes {
		if j != k {
			peers = append(peers, TunnelPeer{NodeName: workload.NodeName(j), PodSubnets: []netip.Prefix{workload.NodeBlock(j)},
				GatewayMAC: indexMAC(2, j), UnderlayIP: netip.AddrFrom4([4]byte{172, 31, byte(j >> 8), byte(j)})})
		}
	}
	share.ClusterRules = cw.byNode[name]
	return Snapshot{Node: node, Round: testRound, Pods: pods, Peers: peers, Policy: &share}
}

// clusterFlows renders node k's flows and counts its cluster rules' flows (conj_id and
// clause flows, not the fixed bypasses).
func (cw clusterWorkload) clusterFlows(tb testing.TB, k int) int {
	tb.Helper()
	c, err := Stages().Compile(cw.snapshot(k))
	if err != nil {
		tb.Fatalf("node %d: %v", k, err)
	}
	if len(c.Conflicts) > 0 {
		tb.Fatalf("node %d: conflicting flows: %v", k, c.Conflicts)
	}
	n := 0
	for _, f := range c.Flows {
		if kind := f.Cookie.ClusterKind(); kind == ClusterKindRule || kind == ClusterKindClause {
			n++
		}
	}
	return n
}

// clusterFlowFormula is the linear formula of docs/cluster-network-policy.md for an IPv4
// node's cluster rules, computed from the rules alone: per rule, its local subjects + its
// peer addresses + its port matches + 1 (the conj_id flow), a clause left out when the
// rule matches any peer, and just its subjects when it has neither a peer clause nor
// ports. A port match is a single port, or one of the aligned power-of-two blocks a range
// splits into (OpenFlow matches a port under a mask).
func clusterFlowFormula(rules []policy.ClusterRule) (flows, subjects, peers, ports int) {
	for _, r := range rules {
		s, p, q := len(r.Subjects), 0, 0
		for _, a := range r.Peers {
			if a.Addr().Is4() {
				p++
			}
		}
		for _, port := range r.Ports {
			q += portBlocks(port)
		}
		subjects, peers, ports = subjects+s, peers+p, ports+q
		switch {
		case r.AnyPeer && q == 0:
			flows += s
		case !r.AnyPeer && p == 0:
			// a peer clause with nothing of the node's family: the rule never matches here
		default:
			flows += s + p + q + 1
		}
	}
	return flows, subjects, peers, ports
}

// portBlocks is how many value/mask matches cover a port or range.
func portBlocks(p policy.Port) int {
	lo, hi := int(p.Port), int(p.EndPort)
	if hi < lo {
		return 1
	}
	n := 0
	for lo <= hi {
		size := 1
		for lo%(size*2) == 0 && lo+size*2-1 <= hi {
			size *= 2
		}
		lo += size
		n++
	}
	return n
}

// TestClusterWorkloadFlowsFollowFormula: the cluster tiers' flows the agent renders equal
// the linear formula computed from the node's rules, the sum of subjects, peers and
// ports, never a product: on every node of a small workload (200 pods, 20 policies, 20
// nodes) and on the first and last node of the full one (1,000 pods, 100 policies; a
// node of it is about 90,000 flows and 3 s, so not all 100: BenchmarkClusterWorkloadFlows
// renders ten).
func TestClusterWorkloadFlowsFollowFormula(t *testing.T) {
	for _, size := range []struct{ pods, policies int }{{200, 20}, {1000, 100}} {
		cw := newClusterWorkload(t, size.pods, size.policies)
		nodes := []int{0, cw.nodes - 1}
		if size.pods == 200 {
			nodes = nil
			for k := range cw.nodes {
				nodes = append(nodes, k)
			}
		}
		for _, k := range nodes {
			rules := cw.byNode[workload.NodeName(k)]
			if len(rules) == 0 {
				t.Fatalf("%d pods: node %d has no cluster rules: the workload must give every node some", size.pods, k)
			}
			want, s, p, q := clusterFlowFormula(rules)
			if got := cw.clusterFlows(t, k); got != want {
				t.Errorf("%d pods, %d policies, node %d: %d cluster flows, want %d by the formula (%d rules: %d subjects + %d peers + %d ports + one per rule)",
					size.pods, size.policies, k, got, want, len(rules), s, p, q)
			}
		}
	}
}

// BenchmarkClusterWorkloadFlows renders ten nodes of the workload (100
// ClusterNetworkPolicies over 1,000 pods on 100 nodes: nodes 0, 10, ..., 90; a node is
// about a second of CPU) and reports the cluster tiers' flows measured against the
// formula: on the sampled node with the most ("flows-node-max", "formula-node-max"),
// over the sample ("flows-sample", "formula-sample") and their ratio
// ("measured/formula", 1 when the flows follow the formula exactly); the formula over
// all 100 nodes ("formula-all-nodes"); the product a cross-product encoding would need
// on the largest node ("product-node-max") and its rules. Run it with -benchtime 1x.
func BenchmarkClusterWorkloadFlows(b *testing.B) {
	cw := newClusterWorkload(b, 1000, 100)
	var maxGot, maxWant, maxProduct, maxRules, got, want, all int
	for b.Loop() {
		maxGot, maxWant, maxProduct, maxRules, got, want = 0, 0, 0, 0, 0, 0
		for k := 0; k < cw.nodes; k += 10 {
			rules := cw.byNode[workload.NodeName(k)]
			n := cw.clusterFlows(b, k)
			f, _, _, _ := clusterFlowFormula(rules)
			product := 0
			for _, r := range rules {
				product += len(r.Subjects) * max(len(r.Peers), 1) * max(len(r.Ports), 1)
			}
			got, want = got+n, want+f
			if n > maxGot {
				maxGot, maxWant, maxProduct, maxRules = n, f, product, len(rules)
			}
		}
	}
	b.StopTimer()
	all = 0
	for k := range cw.nodes {
		f, _, _, _ := clusterFlowFormula(cw.byNode[workload.NodeName(k)])
		all += f
	}
	b.ReportMetric(float64(maxGot), "flows-node-max")
	b.ReportMetric(float64(maxWant), "formula-node-max")
	b.ReportMetric(float64(maxProduct), "product-node-max")
	b.ReportMetric(float64(maxRules), "rules-node-max")
	b.ReportMetric(float64(got), "flows-sample")
	b.ReportMetric(float64(want), "formula-sample")
	b.ReportMetric(float64(got)/float64(max(want, 1)), "measured/formula")
	b.ReportMetric(float64(all), "formula-all-nodes")
	fmt.Printf("\n100 ClusterNetworkPolicies over 1,000 pods on %d nodes, 10 nodes rendered: %d cluster flows (formula %d); "+
		"largest node %d flows (formula %d, %d rules; a cross product would need %d); formula over all nodes %d\n",
		cw.nodes, got, want, maxGot, maxWant, maxRules, maxProduct, all)
}
