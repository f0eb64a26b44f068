package pipeline

import "testing"

func TestCookieLayout(t *testing.T) {
	c := NewCookie(0x1234, CategoryPod, 0xdeadbeef)
	if c != 0x12340300deadbeef {
		t.Fatalf("cookie = %s", c)
	}
	if c.Round() != 0x1234 || c.Category() != CategoryPod || c.Object() != 0xdeadbeef || !c.Owned() {
		t.Errorf("decoded %s as round %d category %d object %#x", c, c.Round(), c.Category(), c.Object())
	}
	if Cookie(0).Owned() || Cookie(0x1234).Owned() {
		t.Error("cookies without a category are not kovs's")
	}
}

func TestCookieFilters(t *testing.T) {
	pod3 := NewCookie(7, CategoryPod, 3)
	pod4 := NewCookie(7, CategoryPod, 4)
	peer := NewCookie(7, CategoryTunnelPeer, 3)
	oldPod3 := NewCookie(6, CategoryPod, 3)

	for _, tc := range []struct {
		name   string
		filter CookieFilter
		text   string
		match  []Cookie
		miss   []Cookie
	}{
		{"round 7", RoundFilter(7), "0x7000000000000/0xffff000000000000", []Cookie{pod3, peer}, []Cookie{oldPod3}},
		{"pods", CategoryFilter(CategoryPod), "0x30000000000/0xff0000000000", []Cookie{pod3, oldPod3}, []Cookie{peer}},
		{"pod 3", ObjectFilter(CategoryPod, 3), "0x30000000003/0xff00ffffffff", []Cookie{pod3, oldPod3}, []Cookie{pod4, peer}},
	} {
		if got := tc.filter.String(); got != tc.text {
			t.Errorf("%s: filter = %s, want %s", tc.name, got, tc.text)
		}
		for _, c := range tc.match {
			if !tc.filter.Matches(c) {
				t.Errorf("%s: does not select %s", tc.name, c)
			}
		}
		for _, c := range tc.miss {
			if tc.filter.Matches(c) {
				t.Errorf("%s: selects %s", tc.name, c)
			}
		}
	}
}

func TestStaleCookies(t *testing.T) {
	if !NewCookie(6, CategoryBase, 0).IsStale(7) {
		t.Error("a flow of round 6 is stale in round 7")
	}
	if NewCookie(7, CategoryBase, 0).IsStale(7) {
		t.Error("a flow of the current round is not stale")
	}
	if Cookie(0).IsStale(7) {
		t.Error("a flow kovs does not own is never stale")
	}
}

func TestPeerObjectIDStable(t *testing.T) {
	if PeerObjectID("node-2") != PeerObjectID("node-2") || PeerObjectID("node-2") == PeerObjectID("node-3") {
		t.Error("peer object ids must be a stable function of the node name")
	}
}

func TestPolicyCookies(t *testing.T) {
	deny := NewPolicyCookie(1, PolicyKindIngressDeny, 3)
	if deny != 0x1050300000003 || deny.Category() != CategoryPolicy || deny.PolicyKind() != PolicyKindIngressDeny || deny.Object() != 3 {
		t.Errorf("ingress deny of port 3 = %s (kind %s, object %d)", deny, deny.PolicyKind(), deny.Object())
	}
	rule := NewPolicyCookie(2, PolicyKindRule, PolicyRuleObjectID("x/web/ingress/0"))
	if rule.Object() != PolicyRuleObjectID("x/web/ingress/0") || rule.Round() != 2 || !ObjectFilter(CategoryPolicy, rule.Object()).Matches(rule) {
		t.Errorf("rule cookie %s does not decode to its rule", rule)
	}
	if NewCookie(1, CategoryPod, 3).PolicyKind() != 0 {
		t.Error("only policy cookies have a policy kind")
	}
	if PolicyRuleObjectID("x/web/ingress/0") == PolicyRuleObjectID("x/web/ingress/1") {
		t.Error("rule object IDs of neighbouring rules collide")
	}
}
