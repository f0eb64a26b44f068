package policy

import (
	"encoding/json"
	"errors"
	"net/netip"
	"reflect"
	"strings"
	"testing"
)

func sampleShare(t *testing.T) NodeShare {
	t.Helper()
	s := NewNodeShare("node-1")
	s.Generation = 4
	s.AddressSets["s-peers"] = AddressSet{ID: "s-peers", Addresses: prefixes(t, "10.0.1.5/32", "fd00::5/128")}
	s.AddressSets["b-world"] = AddressSet{ID: "b-world", Addresses: prefixes(t, "0.0.0.0/1", "128.0.0.0/2")}
	s.AppliedToSets["s-web"] = AppliedToSet{ID: "s-web", Pods: []AppliedPod{
		{PodKey: PodKey{Namespace: "x", Name: "a", UID: "u-a"}, IPs: []netip.Addr{netip.MustParseAddr("10.0.0.2")}},
		{PodKey: PodKey{Namespace: "x", Name: "b", UID: "u-b"}}, // no IPs yet: still protected
	}}
	s.Rules["x/web/ingress/0"] = Rule{ID: "x/web/ingress/0", Policy: PolicyRef{Namespace: "x", Name: "web", UID: "u-np"},
		Direction: Ingress, AppliedTo: "s-web", Peers: []string{"s-peers"}, Ports: []Port{{Protocol: TCP, Port: 80}}, Action: ActionAllow}
	s.Rules["x/web/egress/0"] = Rule{ID: "x/web/egress/0", Policy: PolicyRef{Namespace: "x", Name: "web", UID: "u-np"},
		Direction: Egress, AppliedTo: "s-web", Peers: []string{"b-world"}, Action: ActionAllow}
	s.Isolation = Isolation{Ingress: []PodKey{{Namespace: "x", Name: "a", UID: "u-a"}, {Namespace: "x", Name: "b", UID: "u-b"}},
		Egress: []PodKey{{Namespace: "x", Name: "a", UID: "u-a"}}}
	s.Pods = []PodKey{{Namespace: "x", Name: "a", UID: "u-a"}, {Namespace: "x", Name: "b", UID: "u-b"}, {Namespace: "x", Name: "c", UID: "u-c"}}
	if err := s.Validate(); err != nil {
		t.Fatal(err)
	}
	return s
}

func TestShareJSONRoundTrip(t *testing.T) {
	s := sampleShare(t)
	b, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	var back NodeShare
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(back, s) {
		t.Errorf("round trip changed the share:\n got %+v\nwant %+v", back, s)
	}
	if !strings.Contains(string(b), `"addresses":["10.0.1.5/32","fd00::5/128"]`) {
		t.Errorf("addresses are not encoded as CIDR strings: %s", b)
	}
}

func TestDeltaApply(t *testing.T) {
	s := sampleShare(t)
	newRule := Rule{ID: "x/db/ingress/0", Policy: PolicyRef{Namespace: "x", Name: "db"}, Direction: Ingress,
		AppliedTo: "s-db", Action: ActionAllow}
	d := Delta{
		Node: "node-1", FromGeneration: 4, Generation: 7,
		AddedAppliedToSets: []AppliedToSet{{ID: "s-db", Pods: []AppliedPod{{PodKey: PodKey{Namespace: "x", Name: "c"}}}}},
		AddedRules:         []Rule{newRule},
		UpdatedAddressSets: []AddressSetPatch{{ID: "s-peers", Added: prefixes(t, "10.0.1.6/32"), Removed: prefixes(t, "fd00::5/128")}},
		RemovedRules:       []string{"x/web/egress/0"},
		RemovedAddressSets: []string{"b-world"},
		Isolation:          &Isolation{Ingress: []PodKey{{Namespace: "x", Name: "a", UID: "u-a"}}},
	}
	if err := d.Apply(&s); err != nil {
		t.Fatal(err)
	}
	if err := s.Validate(); err != nil {
		t.Fatal(err)
	}
	if s.Generation != 7 || len(s.Rules) != 2 || !s.Rules["x/db/ingress/0"].Equal(newRule) {
		t.Errorf("share after delta: %+v", s)
	}
	if got := s.AddressSets["s-peers"].Addresses; !reflect.DeepEqual(got, prefixes(t, "10.0.1.5/32", "10.0.1.6/32")) {
		t.Errorf("patched addresses = %v", got)
	}
	if len(s.Isolation.Egress) != 0 || len(s.Isolation.Ingress) != 1 {
		t.Errorf("isolation = %+v", s.Isolation)
	}
}

func TestDeltaApplyRejects(t *testing.T) {
	cases := []struct {
		name string
		d    Delta
	}{
		{"other node", Delta{Node: "node-2", FromGeneration: 4, Generation: 5}},
		{"missed generations", Delta{Node: "node-1", FromGeneration: 3, Generation: 5}},
		{"remove missing", Delta{Node: "node-1", FromGeneration: 4, Generation: 5, RemovedRules: []string{"nope"}}},
		{"add present", Delta{Node: "node-1", FromGeneration: 4, Generation: 5, AddedAddressSets: []AddressSet{{ID: "s-peers"}}}},
		{"update missing", Delta{Node: "node-1", FromGeneration: 4, Generation: 5, UpdatedAppliedToSets: []AppliedToSet{{ID: "nope"}}}},
		{"update removed", Delta{Node: "node-1", FromGeneration: 4, Generation: 5, RemovedAddressSets: []string{"s-peers"},
			UpdatedAddressSets: []AddressSetPatch{{ID: "s-peers"}}}},
		{"add twice", Delta{Node: "node-1", FromGeneration: 4, Generation: 5, AddedRules: []Rule{{ID: "r"}, {ID: "r"}}}},
		{"remove missing pod", Delta{Node: "node-1", FromGeneration: 4, Generation: 5,
			RemovedPods: []PodKey{{Namespace: "x", Name: "a", UID: "u-old"}}}},
		{"add present pod", Delta{Node: "node-1", FromGeneration: 4, Generation: 5,
			AddedPods: []PodKey{{Namespace: "x", Name: "c", UID: "u-c"}}}},
		{"pods not sorted", Delta{Node: "node-1", FromGeneration: 4, Generation: 5,
			AddedPods: []PodKey{{Namespace: "y", Name: "b"}, {Namespace: "y", Name: "a"}}}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := sampleShare(t)
			before := sampleShare(t)
			err := c.d.Apply(&s)
			if err == nil {
				t.Fatal("Apply accepted a delta it must refuse")
			}
			if !reflect.DeepEqual(s, before) {
				t.Error("a refused delta changed the share")
			}
			if c.name == "missed generations" && !errors.Is(err, ErrGeneration) {
				t.Errorf("error %v is not ErrGeneration", err)
			}
		})
	}
}

func TestDeltaRemoveThenAddSameSet(t *testing.T) {
	s := sampleShare(t)
	d := Delta{Node: "node-1", FromGeneration: 4, Generation: 5, RemovedAddressSets: []string{"s-peers"},
		AddedAddressSets: []AddressSet{{ID: "s-peers", Addresses: prefixes(t, "10.9.9.9/32")}}}
	if err := d.Apply(&s); err != nil {
		t.Fatal(err)
	}
	if got := s.AddressSets["s-peers"].Addresses; !reflect.DeepEqual(got, prefixes(t, "10.9.9.9/32")) {
		t.Errorf("addresses = %v", got)
	}
}

func TestAllows(t *testing.T) {
	s := sampleShare(t)
	a := PodKey{Namespace: "x", Name: "a"}
	c := PodKey{Namespace: "x", Name: "c"}
	peer, other := netip.MustParseAddr("10.0.1.5"), netip.MustParseAddr("10.0.1.9")
	checks := []struct {
		name string
		got  bool
		want bool
	}{
		{"ingress from peer on 80", s.AllowsIngress(a, peer, TCP, 80), true},
		{"ingress from peer on 81", s.AllowsIngress(a, peer, TCP, 81), false},
		{"ingress from peer on UDP 80", s.AllowsIngress(a, peer, UDP, 80), false},
		{"ingress from other", s.AllowsIngress(a, other, TCP, 80), false},
		{"not isolated pod", s.AllowsIngress(c, other, TCP, 80), true},
		{"egress into ipBlock", s.AllowsEgress(a, netip.MustParseAddr("1.2.3.4"), UDP, 53), true},
		{"egress outside ipBlock", s.AllowsEgress(a, netip.MustParseAddr("200.1.1.1"), UDP, 53), false},
	}
	for _, c := range checks {
		if c.got != c.want {
			t.Errorf("%s: got %v, want %v", c.name, c.got, c.want)
		}
	}
	if got := s.MatchingRules(Ingress, a, peer, TCP, 80); !reflect.DeepEqual(got, []string{"x/web/ingress/0"}) {
		t.Errorf("MatchingRules = %v", got)
	}
}

func TestPortMatches(t *testing.T) {
	cases := []struct {
		p     Port
		proto Protocol
		port  int32
		want  bool
	}{
		{Port{Protocol: TCP}, TCP, 1, true},
		{Port{Protocol: TCP}, UDP, 1, false},
		{Port{Protocol: SCTP, Port: 9}, SCTP, 9, true},
		{Port{Protocol: TCP, Port: 9}, TCP, 10, false},
		{Port{Protocol: TCP, Port: 8000, EndPort: 8080}, TCP, 8080, true},
		{Port{Protocol: TCP, Port: 8000, EndPort: 8080}, TCP, 8081, false},
		{Port{Protocol: TCP, Port: 8000, EndPort: 8080}, TCP, 7999, false},
	}
	for _, c := range cases {
		if got := c.p.Matches(c.proto, c.port); got != c.want {
			t.Errorf("%+v.Matches(%s, %d) = %v, want %v", c.p, c.proto, c.port, got, c.want)
		}
	}
}

func TestDeltaPods(t *testing.T) {
	s := sampleShare(t)
	old := s.Clone()
	c := PodKey{Namespace: "x", Name: "c", UID: "u-c"}
	c2 := PodKey{Namespace: "x", Name: "c", UID: "u-c2"}
	d := Delta{Node: "node-1", FromGeneration: 4, Generation: 5,
		AddedPods: []PodKey{{Namespace: "w", Name: "z", UID: "u-z"}, c2}, RemovedPods: []PodKey{c}}
	if err := d.Apply(&s); err != nil {
		t.Fatal(err)
	}
	if err := s.Validate(); err != nil {
		t.Fatal(err)
	}
	want := []PodKey{{Namespace: "w", Name: "z", UID: "u-z"}, {Namespace: "x", Name: "a", UID: "u-a"},
		{Namespace: "x", Name: "b", UID: "u-b"}, c2}
	if !reflect.DeepEqual(s.Pods, want) {
		t.Errorf("pods after delta = %v, want %v", s.Pods, want)
	}
	if s.HasPod(c) || !s.HasPod(c2) || !s.HasPod(PodKey{Namespace: "x", Name: "c"}) || s.HasPod(PodKey{Namespace: "x", Name: "d"}) {
		t.Error("HasPod does not follow the delta (by UID, or by name when the UID is empty)")
	}
	if !old.HasPod(c) || len(old.Pods) != 3 {
		t.Errorf("the delta changed a clone taken before it: %v", old.Pods)
	}
}

func TestCloneIsIndependent(t *testing.T) {
	s := sampleShare(t)
	c := s.Clone()
	d := Delta{Node: "node-1", FromGeneration: 4, Generation: 5, RemovedRules: []string{"x/web/egress/0"},
		UpdatedAddressSets: []AddressSetPatch{{ID: "s-peers", Added: prefixes(t, "10.0.1.6/32")}}}
	if err := d.Apply(&c); err != nil {
		t.Fatal(err)
	}
	if len(s.Rules) != 2 || len(s.AddressSets["s-peers"].Addresses) != 2 {
		t.Errorf("applying a delta to a clone changed the original: %+v", s)
	}
}
