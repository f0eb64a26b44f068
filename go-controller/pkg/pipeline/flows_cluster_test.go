package pipeline

import (
	"fmt"
	"net/netip"
	"slices"
	"testing"

	"github.com/kovs-net/kovs/go-controller/pkg/policy"
)

// The reference ClusterNetworkPolicy scenario: the NetworkPolicy scenario's node-1
// (policy_scenario_test.go) with these cluster rules in its share:
//
//	Admin 10     deny-clients  ingress Deny   x/a, x/b  from s-clients' addresses, TCP 80
//	Admin 20     pass-node-2   ingress Pass   x/a       from 10.244.2.0/24, TCP 8000-8080
//	Admin 30     deny-range    ingress Deny   x/a       from anywhere, TCP 8000-8080
//	Admin 40     deny-dns      egress  Deny   x/a       to 8.8.8.8
//	Baseline 10  tenants       ingress Deny   x/a, y/c  from 10.244.0.0/16 and fd00:10:244::/48
//	Baseline 20  no-udp-out    egress  Deny   y/c       anywhere, UDP
//
// NetworkPolicy allows x/a TCP 80 from s-clients and TCP 8000-8080 from anywhere, and
// isolates x/a (so Baseline never sees it); y/c is selected by no NetworkPolicy.
func clusterShare() policy.NodeShare {
	s := policyShare()
	a, b, c := key("x", "a"), key("x", "b"), key("y", "c")
	tcp := func(port, end int32) []policy.Port {
		return []policy.Port{{Protocol: policy.TCP, Port: port, EndPort: end}}
	}
	rule := func(name string, tier policy.Tier, prio int32, dir policy.Direction, action policy.ClusterAction, subjects ...policy.PodKey) policy.ClusterRule {
		return policy.ClusterRule{ID: name + "/" + string(dir) + "/0", Policy: name, Tier: tier, Priority: prio, Direction: dir,
			Action: action, Subjects: subjects}
	}
	denyClients := rule("deny-clients", policy.TierAdmin, 10, policy.Ingress, policy.ClusterDeny, a, b)
	denyClients.Peers, denyClients.Ports = s.AddressSets["s-clients"].Addresses, tcp(80, 0)
	passNode2 := rule("pass-node-2", policy.TierAdmin, 20, policy.Ingress, policy.ClusterPass, a)
	passNode2.Peers, passNode2.Ports = prefixList("10.244.2.0/24"), tcp(8000, 8080)
	denyRange := rule("deny-range", policy.TierAdmin, 30, policy.Ingress, policy.ClusterDeny, a)
	denyRange.AnyPeer, denyRange.Ports = true, tcp(8000, 8080)
	denyDNS := rule("deny-dns", policy.TierAdmin, 40, policy.Egress, policy.ClusterDeny, a)
	denyDNS.Peers = prefixList("8.8.8.8/32")
	tenants := rule("tenants", policy.TierBaseline, 10, policy.Ingress, policy.ClusterDeny, a, c)
	tenants.Peers = prefixList("10.244.0.0/16", "fd00:10:244::/48")
	noUDP := rule("no-udp-out", policy.TierBaseline, 20, policy.Egress, policy.ClusterDeny, c)
	noUDP.AnyPeer, noUDP.Ports = true, []policy.Port{{Protocol: policy.UDP}}
	s.ClusterRules = []policy.ClusterRule{denyClients, passNode2, denyRange, denyDNS, tenants, noUDP}
	slices.SortFunc(s.ClusterRules, policy.CompareClusterRules)
	return s
}

func clusterScenario() scenario {
	sc := policyScenario()
	sc.name = "three-nodes-dual-stack-node-1-cluster-policy"
	sc.title = "node-1 of three dual-stack nodes, with NetworkPolicy and ClusterNetworkPolicy (see flows_cluster_test.go)"
	share := clusterShare()
	sc.policy = &share
	return sc
}

// decidedBy is the table a trace ended in, when dropped, and the cluster rule of the
// flow that decided (by its cookie), if any.
func decidedBy(share policy.NodeShare, r Result) (Table, string) {
	var rule string
	for _, s := range r.Steps {
		if k := s.Flow.Cookie.ClusterKind(); k == ClusterKindRule {
			if cr, ok := ClusterRuleByObject(&share, s.Flow.Cookie.Object()); ok {
				rule = cr.ID
			}
		}
	}
	return r.Steps[len(r.Steps)-1].Table, rule
}

// TestClusterPolicyTiers traces the reference scenario's connections through its flows:
// each ends where the tiers say, and the trace names the cluster rule that decided.
func TestClusterPolicyTiers(t *testing.T) {
	share := clusterShare()
	sc := clusterScenario()
	tr := sc.tracer(t)
	pods := policyPods()
	a, b, c := pods[0], pods[1], pods[2]
	for _, tc := range []struct {
		name      string
		pkt       Packet
		ct        CTFlags
		delivered uint32 // 0: dropped
		table     Table  // where it was dropped
		rule      string // the cluster rule that decided, if one did
	}{
		{"an Admin Deny overrides the NetworkPolicy that allows x/b to x/a TCP 80",
			fromLocal(t, b, podIP(t, a, false), IPProtoTCP, 80), CTNew, 0, AdminIngressPolicy, "deny-clients/Ingress/0"},
		{"the same over IPv6", fromLocal(t, b, podIP(t, a, true), IPProtoTCP, 80), CTNew, 0, AdminIngressPolicy, "deny-clients/Ingress/0"},
		{"a Pass hands node-2's TCP 8080 to NetworkPolicy, which allows it (past the Deny after the Pass)",
			arriving(remoteR4, a, podIP(t, a, false), IPProtoTCP, 8080), CTNew, ofportA, Table{}, "pass-node-2/Ingress/0"},
		{"without the Pass, the Admin Deny after it: node-3's TCP 8080",
			arriving(remoteS4, a, podIP(t, a, false), IPProtoTCP, 8080), CTNew, 0, AdminIngressPolicy, "deny-range/Ingress/0"},
		{"Baseline applies where no NetworkPolicy selects: node-3 to y/c",
			arriving(remoteS4, c, podIP(t, c, false), IPProtoTCP, 443), CTNew, 0, BaselineIngressPolicy, "tenants/Ingress/0"},
		{"the same over IPv6", arriving(remoteS6, c, podIP(t, c, true), IPProtoTCP, 443), CTNew, 0, BaselineIngressPolicy, "tenants/Ingress/0"},
		{"Baseline does not apply to a pod NetworkPolicy isolates: x/a's default deny decides",
			arriving(remoteS4, a, podIP(t, a, false), IPProtoTCP, 9999), CTNew, 0, IngressPolicy, ""},
		{"outside Baseline's peers y/c is open", arriving(ip("192.168.1.5"), c, podIP(t, c, false), IPProtoTCP, 443), CTNew, ofportC, Table{}, ""},
		{"the node reaches y/c from its own address despite the Baseline Deny of 10.244.0.0/16",
			fromNode(ip("10.244.1.1"), c, podIP(t, c, false), 443), CTNew, ofportC, Table{}, ""},
		{"replies of y/c's own connections pass", arriving(remoteS4, c, podIP(t, c, false), IPProtoTCP, 443), CTEstablished, ofportC, Table{}, ""},
		{"an Admin egress Deny overrides x/a's NetworkPolicy allow to 0.0.0.0/0",
			fromLocal(t, a, ip("8.8.8.8"), IPProtoTCP, 443), CTNew, 0, AdminEgressPolicy, "deny-dns/Egress/0"},
		{"x/a's NetworkPolicy allows the rest", fromLocal(t, a, ip("1.1.1.1"), IPProtoTCP, 443), CTNew, gatewayPort, Table{}, ""},
		{"a Baseline egress Deny for y/c, whose egress no NetworkPolicy isolates",
			fromLocal(t, c, ip("1.1.1.1"), IPProtoUDP, 53), CTNew, 0, BaselineEgressPolicy, "no-udp-out/Egress/0"},
		{"y/c's TCP is not denied", fromLocal(t, c, ip("1.1.1.1"), IPProtoTCP, 53), CTNew, gatewayPort, Table{}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := trace(t, tr, tc.pkt, tc.ct)
			// The reference verdict says the same, where it speaks (not for the node's
			// own traffic or replies, which the datapath lets through before any tier).
			table, rule := decidedBy(share, r)
			if tc.delivered != 0 {
				wantDelivered(t, r, tc.delivered)
			} else if !r.Dropped() || table != tc.table {
				t.Fatalf("want a drop in %s, got:\n%s", tc.table, r)
			}
			if rule != tc.rule {
				t.Errorf("decided by cluster rule %q, want %q:\n%s", rule, tc.rule, r)
			}
		})
	}
}

// TestClusterBypassMirrorsPolicyBypass: what IngressPolicy and EgressPolicy let through
// above their rules, the Admin tables send on to them untouched, in a scenario with
// Services (whose hairpin flows add to IngressPolicy's) and cluster rules.
func TestClusterBypassMirrorsPolicyBypass(t *testing.T) {
	sc := clusterScenario()
	flows, _ := withServices(t, sc, serviceScenarioPorts())
	admin := map[uint8]Table{IngressPolicy.ID: AdminIngressPolicy, EgressPolicy.ID: AdminEgressPolicy}
	checked := 0
	for _, f := range flows {
		to, ok := admin[f.Table.ID]
		if !ok || f.Priority <= prioPolicyAllowAll || f.Priority == prioPolicyDeny {
			continue
		}
		checked++
		if !slices.ContainsFunc(flows, func(g Flow) bool {
			return g.Table == to && g.Match.String() == f.Match.String() && g.Priority > prioClusterRuleTop &&
				slices.Equal(g.Actions, []Action{Goto(f.Table)})
		}) {
			t.Errorf("%s lets %s through before its rules, but %s does not send it there", f.Table, f.Match, to)
		}
	}
	if checked < 6 {
		t.Fatalf("only %d bypass flows in the policy tables: the scenario lacks what the test is about", checked)
	}
}

// TestClusterPolicyFlowCountIsLinear: K cluster rules over the same A subjects, P peer
// addresses and R TCP ports compile to K(A + P + 2R + 1) flows on a dual-stack node (a
// subject, peer and port clause flow each, tcp and tcp6 for a port, and the conj_id
// flow), plus the bypasses: the sum per rule, never the product.
func TestClusterPolicyFlowCountIsLinear(t *testing.T) {
	for _, size := range []struct{ k, p, r int }{{1, 1, 1}, {10, 20, 3}, {40, 100, 2}} {
		share := policyShare()
		subjects := []policy.PodKey{key("x", "a"), key("x", "b"), key("y", "c")}
		var peers []netip.Prefix
		for i := range size.p {
			peers = append(peers, netip.PrefixFrom(netip.AddrFrom4([4]byte{10, 1, byte(i / 200), byte(i % 200)}), 32))
		}
		var ports []policy.Port
		for i := range size.r {
			ports = append(ports, policy.Port{Protocol: policy.TCP, Port: int32(1000 + 2*i)})
		}
		for i := range size.k {
			tier := []policy.Tier{policy.TierAdmin, policy.TierBaseline}[i%2]
			dir := []policy.Direction{policy.Ingress, policy.Egress}[(i/2)%2]
			share.ClusterRules = append(share.ClusterRules, policy.ClusterRule{ID: fmt.Sprintf("p%d/%s/0", i, dir), Policy: fmt.Sprint("p", i),
				Tier: tier, Priority: int32(i), Direction: dir, Action: policy.ClusterDeny, Subjects: subjects,
				Peers: policy.SortPrefixes(peers), Ports: ports})
		}
		slices.SortFunc(share.ClusterRules, policy.CompareClusterRules)
		sc := policyScenario()
		sc.policy = &share
		var rules, bypass int
		for _, f := range sc.flows(t) {
			switch f.Cookie.ClusterKind() {
			case ClusterKindRule, ClusterKindClause:
				rules++
			case ClusterKindBypass:
				bypass++
			}
		}
		if want := size.k * (len(subjects) + size.p + 2*size.r + 1); rules != want {
			t.Errorf("K=%d, P=%d, R=%d: %d rule flows, want %d", size.k, size.p, size.r, rules, want)
		}
		if bypass == 0 || bypass > 16 {
			t.Errorf("%d bypass flows", bypass)
		}
	}
}
