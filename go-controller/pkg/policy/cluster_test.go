package policy

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"slices"
	"strings"
	"testing"
)

// TestDecideTiers checks the share's reference verdict across the tiers, one connection
// per case.
func TestDecideTiers(t *testing.T) {
	a, b := PodKey{"x", "a", "1"}, PodKey{"x", "b", "2"}
	peer := netip.MustParseAddr("10.0.0.5")
	share := NewNodeShare("n")
	share.Pods = []PodKey{a, b}
	share.Isolation = Isolation{Ingress: []PodKey{a}}
	share.AppliedToSets["g"] = AppliedToSet{ID: "g", Pods: []AppliedPod{{PodKey: a}}}
	share.Rules["np"] = Rule{ID: "np", AppliedTo: "g", Direction: Ingress, Action: ActionAllow, Ports: []Port{{Protocol: TCP, Port: 80}}}
	share.ClusterRules = []ClusterRule{
		{ID: "deny-22/ingress/0", Policy: "deny-22", Tier: TierAdmin, Priority: 1, Direction: Ingress, Action: ClusterDeny,
			Subjects: []PodKey{a, b}, AnyPeer: true, Ports: []Port{{Protocol: TCP, Port: 22}}},
		{ID: "pass-80/ingress/0", Policy: "pass-80", Tier: TierAdmin, Priority: 2, Direction: Ingress, Action: ClusterPass,
			Subjects: []PodKey{a, b}, Peers: []netip.Prefix{HostPrefix(peer)}, Ports: []Port{{Protocol: TCP, Port: 80}}},
		{ID: "deny-80/ingress/0", Policy: "deny-80", Tier: TierAdmin, Priority: 3, Direction: Ingress, Action: ClusterDeny,
			Subjects: []PodKey{a, b}, AnyPeer: true, Ports: []Port{{Protocol: TCP, Port: 80}}},
		{ID: "base/ingress/0", Policy: "base", Tier: TierBaseline, Priority: 1, Direction: Ingress, Action: ClusterDeny,
			Subjects: []PodKey{a, b}, AnyPeer: true},
	}
	if err := share.Validate(); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		pod   PodKey
		port  int32
		want  ClusterDecision
		about string
	}{
		{a, 22, ClusterDecision{false, "Admin", "deny-22/ingress/0"}, "an Admin Deny overrides NetworkPolicy"},
		{a, 80, ClusterDecision{true, DecidedByNetworkPolicy, ""}, "a Pass skips the Admin Deny after it, NetworkPolicy allows"},
		{a, 443, ClusterDecision{false, DecidedByNetworkPolicy, ""}, "an isolated pod never reaches Baseline"},
		{b, 80, ClusterDecision{false, "Baseline", "base/ingress/0"}, "a pod no NetworkPolicy isolates meets Baseline after a Pass"},
		{b, 443, ClusterDecision{false, "Baseline", "base/ingress/0"}, "Baseline applies where no NetworkPolicy selects"},
	} {
		if got := share.Decide(Ingress, tc.pod, peer, TCP, tc.port); got != tc.want {
			t.Errorf("%s: %s TCP %d: %+v, want %+v", tc.about, tc.pod.Name, tc.port, got, tc.want)
		}
	}
	if got := share.Decide(Egress, a, peer, TCP, 22); got != (ClusterDecision{true, DecidedByDefault, ""}) {
		t.Errorf("egress without rules: %+v, want the default allow", got)
	}
}

// TestClusterRulesTravelInDeltas checks that a delta replaces the cluster rules whole,
// leaves them alone when it does not carry them, survives JSON, and that Validate refuses
// rules out of precedence order.
func TestClusterRulesTravelInDeltas(t *testing.T) {
	a := PodKey{"x", "a", "1"}
	rules := []ClusterRule{
		{ID: "p/ingress/0", Policy: "p", Tier: TierAdmin, Priority: 5, Direction: Ingress, Action: ClusterDeny, Subjects: []PodKey{a}, AnyPeer: true},
		{ID: "q/egress/0", Policy: "q", Tier: TierBaseline, Priority: 1, Direction: Egress, Action: ClusterAccept, Subjects: []PodKey{a},
			Peers: cidrs("10.0.0.0/8"), Ports: []Port{{Protocol: UDP, Port: 53}}},
	}
	share := NewNodeShare("n")
	for i, d := range []Delta{
		{Node: "n", FromGeneration: 0, Generation: 1, ClusterRules: &rules},
		{Node: "n", FromGeneration: 1, Generation: 2, AddedPods: []PodKey{a}},
	} {
		var wire Delta
		raw, err := json.Marshal(d)
		if err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(raw, &wire); err != nil {
			t.Fatal(err)
		}
		if err := wire.Apply(&share); err != nil {
			t.Fatalf("delta %d: %v", i, err)
		}
		if !EqualClusterRules(share.ClusterRules, rules) {
			t.Fatalf("after delta %d the share has cluster rules %+v, want %+v", i, share.ClusterRules, rules)
		}
	}
	none := []ClusterRule{}
	if err := (Delta{Node: "n", FromGeneration: 2, Generation: 3, ClusterRules: &none}).Apply(&share); err != nil || len(share.ClusterRules) != 0 {
		t.Fatalf("a delta with an empty list left %d rules (%v)", len(share.ClusterRules), err)
	}
	reversed := []ClusterRule{rules[1], rules[0]}
	if err := (Delta{Node: "n", FromGeneration: 3, Generation: 4, ClusterRules: &reversed}).Apply(&share); err == nil {
		t.Fatal("a delta with Baseline before Admin applied")
	}
}

// TestMeetKeepsBaselineOfAPodIsolatedInOneShareOnly is the case policy.Meet got wrong
// before it knew the tiers: old has no NetworkPolicy for x/a and a Baseline Deny for it;
// new isolates x/a with a rule that allows the peer. The meet must not keep new's rule
// (old denied through Baseline).
func TestMeetKeepsBaselineOfAPodIsolatedInOneShareOnly(t *testing.T) {
	a := PodKey{"x", "a", "1"}
	peer := netip.MustParseAddr("10.0.0.5")
	old := NewNodeShare("n")
	old.Pods = []PodKey{a}
	old.ClusterRules = []ClusterRule{{ID: "base/ingress/0", Policy: "base", Tier: TierBaseline, Direction: Ingress,
		Action: ClusterDeny, Subjects: []PodKey{a}, AnyPeer: true}}
	nu := NewNodeShare("n")
	nu.Pods = []PodKey{a}
	nu.Isolation = Isolation{Ingress: []PodKey{a}}
	nu.AppliedToSets["g"] = AppliedToSet{ID: "g", Pods: []AppliedPod{{PodKey: a}}}
	nu.Rules["np"] = Rule{ID: "np", AppliedTo: "g", Direction: Ingress, Action: ActionAllow}
	if old.Decide(Ingress, a, peer, TCP, 80).Allowed || !nu.Decide(Ingress, a, peer, TCP, 80).Allowed {
		t.Fatal("the case is not what it says: old must deny and new allow")
	}
	for _, m := range []NodeShare{Meet(old, nu), Meet(nu, old)} {
		if d := m.Decide(Ingress, a, peer, TCP, 80); d.Allowed {
			t.Errorf("the meet allows what old's Baseline denies (decided by %s %s)", d.Tier, d.Rule)
		}
	}
}

// TestMeetOfTieredSharesAllowsOnlyWhatBothAllow checks Meet over random pairs of shares
// with NetworkPolicy rules, isolation and cluster rules of both tiers and all actions:
// every connection the meet allows, in either direction, both shares allow.
func TestMeetOfTieredSharesAllowsOnlyWhatBothAllow(t *testing.T) {
	pods := []PodKey{{"x", "a", "1"}, {"x", "b", "2"}, {"y", "c", "3"}}
	addrs := []netip.Addr{netip.MustParseAddr("10.0.0.5"), netip.MustParseAddr("10.0.1.7"), netip.MustParseAddr("192.168.0.1")}
	peerSets := [][]netip.Prefix{cidrs("10.0.0.5/32"), cidrs("10.0.0.0/16"), cidrs("10.0.1.7/32", "192.168.0.0/24")}
	portSets := [][]Port{nil, {{Protocol: TCP, Port: 80}}, {{Protocol: TCP, Port: 80, EndPort: 443}}, {{Protocol: UDP, Port: 53}}}
	rng := rand.New(rand.NewPCG(28, 37))
	subset := func() []PodKey {
		var out []PodKey
		for _, p := range pods {
			if rng.IntN(2) == 0 {
				out = append(out, p)
			}
		}
		return out
	}
	dirs := []Direction{Ingress, Egress}
	random := func() NodeShare {
		s := NewNodeShare("n")
		s.Pods = slices.Clone(pods)
		s.Isolation = Isolation{Ingress: subset(), Egress: subset()}
		for i := range rng.IntN(4) {
			id := fmt.Sprintf("np%d", i)
			s.AppliedToSets["g"+id] = AppliedToSet{ID: "g" + id}
			for _, p := range subset() {
				set := s.AppliedToSets["g"+id]
				set.Pods = append(set.Pods, AppliedPod{PodKey: p})
				s.AppliedToSets["g"+id] = set
			}
			s.AddressSets["s"+id] = AddressSet{ID: "s" + id, Addresses: peerSets[rng.IntN(len(peerSets))]}
			r := Rule{ID: id, AppliedTo: "g" + id, Direction: dirs[rng.IntN(2)], Action: ActionAllow, Ports: portSets[rng.IntN(len(portSets))]}
			if rng.IntN(3) > 0 {
				r.Peers = []string{"s" + id}
			}
			s.Rules[id] = r
			// As in every share the controller sends: a rule's pods are isolated in its
			// direction.
			for _, p := range s.AppliedToSets["g"+id].Pods {
				if r.Direction == Ingress {
					s.Isolation.Ingress = append(s.Isolation.Ingress, p.PodKey)
				} else {
					s.Isolation.Egress = append(s.Isolation.Egress, p.PodKey)
				}
			}
		}
		for _, list := range []*[]PodKey{&s.Isolation.Ingress, &s.Isolation.Egress} {
			slices.SortFunc(*list, PodKey.Compare)
			*list = slices.Compact(*list)
		}
		for i := range rng.IntN(6) {
			// IDs from a small pool, so that old and new share rules and change them.
			// An ID names its direction, as the controller's do.
			pol, dir := fmt.Sprintf("cnp%d", rng.IntN(4)), dirs[rng.IntN(2)]
			r := ClusterRule{ID: fmt.Sprintf("%s/%s/%d", pol, dir, i%2), Policy: pol, Index: i % 2, Tier: []Tier{TierAdmin, TierBaseline}[rng.IntN(2)],
				Priority: int32(rng.IntN(3)), Direction: dir, Action: []ClusterAction{ClusterAccept, ClusterDeny, ClusterPass}[rng.IntN(3)],
				Subjects: subset(), Ports: portSets[rng.IntN(len(portSets))]}
			if rng.IntN(4) == 0 {
				r.AnyPeer = true
			} else {
				r.Peers = peerSets[rng.IntN(len(peerSets))]
			}
			if !slices.ContainsFunc(s.ClusterRules, func(o ClusterRule) bool { return o.ID == r.ID }) {
				s.ClusterRules = append(s.ClusterRules, r)
			}
		}
		slices.SortFunc(s.ClusterRules, CompareClusterRules)
		return s
	}
	allowedBoth, deniedOne, meetsOfMeets := 0, 0, 0
	for round := range 3000 {
		old, nu := random(), random()
		m := Meet(old, nu)
		if round%2 == 1 {
			// A meet of a meet: what the transition gate sends a node that is still at a
			// meet (its relaxation waiting) when the next change comes.
			third := random()
			if rng.IntN(2) == 0 {
				// The next target often keeps the cluster rules of the one before.
				third.ClusterRules = slices.Clone(nu.ClusterRules)
			}
			old, nu = m, third
			m = Meet(old, nu)
			if slices.ContainsFunc(old.ClusterRules, func(r ClusterRule) bool {
				return strings.HasSuffix(r.ID, "/meet-deny") && slices.ContainsFunc(old.ClusterRules, func(o ClusterRule) bool { return o.ID+"/meet-deny" == r.ID })
			}) {
				meetsOfMeets++
			}
		}
		if err := m.Validate(); err != nil {
			t.Fatalf("round %d: the meet is not a valid share: %v\nold %+v\nnew %+v", round, err, old.ClusterRules, nu.ClusterRules)
		}
		for _, pod := range pods {
			for _, addr := range addrs {
				for _, p := range []Port{{Protocol: TCP, Port: 80}, {Protocol: TCP, Port: 200}, {Protocol: UDP, Port: 53}} {
					for _, dir := range dirs {
						o, n, got := old.Decide(dir, pod, addr, p.Protocol, p.Port), nu.Decide(dir, pod, addr, p.Protocol, p.Port), m.Decide(dir, pod, addr, p.Protocol, p.Port)
						if got.Allowed && !(o.Allowed && n.Allowed) {
							t.Fatalf("round %d: the meet allows %s of %s %s %d with %s (by %s %s), old %+v, new %+v\nold %+v\nnew %+v",
								round, dir, pod.Name, p.Protocol, p.Port, addr, got.Tier, got.Rule, o, n, old, nu)
						}
						if o.Allowed && n.Allowed {
							allowedBoth++
						} else {
							deniedOne++
						}
					}
				}
			}
		}
	}
	if allowedBoth == 0 || deniedOne == 0 || meetsOfMeets == 0 {
		t.Fatalf("the shares never allowed (%d) or never denied (%d) in common, or no meet of a meet with a meet-deny rule (%d): the test proves nothing",
			allowedBoth, deniedOne, meetsOfMeets)
	}
}
