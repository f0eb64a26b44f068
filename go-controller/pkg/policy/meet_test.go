package policy

import (
	"net/netip"
	"slices"
	"testing"
)

func cidrs(ss ...string) []netip.Prefix {
	var out []netip.Prefix
	for _, s := range ss {
		out = append(out, netip.MustParsePrefix(s))
	}
	return SortPrefixes(out)
}

func TestIntersectPrefixes(t *testing.T) {
	for _, tc := range []struct {
		a, b, want []netip.Prefix
	}{
		{cidrs("10.0.0.1/32", "10.0.0.2/32"), cidrs("10.0.0.2/32", "10.0.0.3/32"), cidrs("10.0.0.2/32")},
		{cidrs("10.0.0.0/24"), cidrs("10.0.0.7/32", "10.0.1.7/32"), cidrs("10.0.0.7/32")},
		{cidrs("10.0.0.0/8"), cidrs("10.1.0.0/16", "192.168.0.0/16"), cidrs("10.1.0.0/16")},
		{cidrs("10.0.0.0/25", "10.0.0.128/25"), cidrs("10.0.0.0/24"), cidrs("10.0.0.0/25", "10.0.0.128/25")},
		{cidrs("fd00::/64"), cidrs("fd00::5/128", "10.0.0.5/32"), cidrs("fd00::5/128")},
		{cidrs("10.0.0.0/24"), nil, nil},
	} {
		if got := IntersectPrefixes(tc.a, tc.b); !slices.Equal(got, tc.want) {
			t.Errorf("%v ∩ %v = %v, want %v", tc.a, tc.b, got, tc.want)
		}
		if got := IntersectPrefixes(tc.b, tc.a); !slices.Equal(got, tc.want) {
			t.Errorf("%v ∩ %v = %v, want %v", tc.b, tc.a, got, tc.want)
		}
	}
}

func TestMeetPorts(t *testing.T) {
	tcp := func(p, end int32) Port { return Port{Protocol: TCP, Port: p, EndPort: end} }
	for _, tc := range []struct {
		a, b, want []Port
		ok         bool
	}{
		{nil, []Port{tcp(80, 0)}, []Port{tcp(80, 0)}, true},
		{[]Port{tcp(80, 90)}, []Port{tcp(85, 100)}, []Port{tcp(85, 90)}, true},
		{[]Port{tcp(80, 90)}, []Port{tcp(90, 100)}, []Port{tcp(90, 0)}, true},
		{[]Port{tcp(0, 0)}, []Port{tcp(443, 0)}, []Port{tcp(443, 0)}, true},
		{[]Port{tcp(80, 0)}, []Port{{Protocol: UDP, Port: 80}}, nil, false},
		{[]Port{tcp(0, 0)}, []Port{tcp(0, 0)}, []Port{tcp(0, 0)}, true},
	} {
		got, ok := MeetPorts(tc.a, tc.b)
		if ok != tc.ok || !slices.Equal(got, tc.want) {
			t.Errorf("meet of %v and %v = %v, %v; want %v, %v", tc.a, tc.b, got, ok, tc.want, tc.ok)
		}
	}
}

// TestMeetAllowsOnlyWhatBothAllow checks Meet against both shares' own verdicts on a
// grid of pods, addresses and ports, for a pair of shares that differ in every way the
// meet handles.
func TestMeetAllowsOnlyWhatBothAllow(t *testing.T) {
	a, b, c := PodKey{"x", "a", "1"}, PodKey{"x", "b", "2"}, PodKey{"x", "c", "3"}
	applied := func(id string, pods ...PodKey) AppliedToSet {
		s := AppliedToSet{ID: id}
		for _, p := range pods {
			s.Pods = append(s.Pods, AppliedPod{PodKey: p})
		}
		return s
	}
	rule := func(id, appliedTo string, dir Direction, peers []string, ports ...Port) Rule {
		return Rule{ID: id, AppliedTo: appliedTo, Direction: dir, Peers: peers, Ports: ports, Action: ActionAllow}
	}
	old := NewNodeShare("n")
	old.Pods = []PodKey{a, b}
	old.Isolation = Isolation{Ingress: []PodKey{a}}
	old.AddressSets["s"] = AddressSet{ID: "s", Addresses: cidrs("10.0.0.0/24")}
	old.AppliedToSets["g"] = applied("g", a)
	old.Rules["r1"] = rule("r1", "g", Ingress, []string{"s"}, Port{Protocol: TCP, Port: 80, EndPort: 90})
	old.Rules["r2"] = rule("r2", "g", Ingress, nil, Port{Protocol: UDP, Port: 53})

	nu := NewNodeShare("n")
	nu.Pods = []PodKey{a, b, c}
	nu.Isolation = Isolation{Ingress: []PodKey{a, c}, Egress: []PodKey{b}}
	nu.AddressSets["s"] = AddressSet{ID: "s", Addresses: cidrs("10.0.0.0/25", "10.0.9.0/24")}
	nu.AppliedToSets["g"] = applied("g", a, c)
	nu.AppliedToSets["h"] = applied("h", b)
	nu.Rules["r1"] = rule("r1", "g", Ingress, []string{"s"}, Port{Protocol: TCP, Port: 85, EndPort: 100})
	nu.Rules["r3"] = rule("r3", "h", Egress, []string{"s"})
	nu.Rules["r4"] = rule("r4", "g", Ingress, nil, Port{Protocol: TCP, Port: 22})

	m := Meet(old, nu)
	if err := m.Validate(); err != nil {
		t.Fatalf("the meet is not a valid share: %v", err)
	}
	addrs := []netip.Addr{netip.MustParseAddr("10.0.0.5"), netip.MustParseAddr("10.0.0.200"), netip.MustParseAddr("10.0.9.1"), netip.MustParseAddr("192.168.0.1")}
	ports := []struct {
		proto Protocol
		port  int32
	}{{TCP, 22}, {TCP, 80}, {TCP, 87}, {TCP, 95}, {UDP, 53}}
	allowedBoth := 0
	for _, pod := range []PodKey{a, b, c} {
		for _, addr := range addrs {
			for _, p := range ports {
				for _, dir := range []Direction{Ingress, Egress} {
					verdict := func(s NodeShare) bool { return s.HasPod(pod) && s.allows(dir, pod, addr, p.proto, p.port) }
					got, both := verdict(m), verdict(old) && verdict(nu)
					if got && !both {
						t.Errorf("the meet lets %s %s/%s %s %d with %s, which old (%v) or new (%v) denies",
							dir, pod.Namespace, pod.Name, p.proto, p.port, addr, verdict(old), verdict(nu))
					}
					if both {
						allowedBoth++
					}
					// Exact where no rule or set of the pod changed: x/b's ingress.
					if both && !got && pod == b && dir == Ingress {
						t.Errorf("the meet denies %s %s/%s %s %d with %s, which both allow", dir, pod.Namespace, pod.Name, p.proto, p.port, addr)
					}
				}
			}
		}
	}
	if allowedBoth == 0 {
		t.Fatal("old and new allow nothing in common: the test proves nothing")
	}
	if !m.AllowsIngress(a, netip.MustParseAddr("10.0.0.5"), TCP, 87) {
		t.Error("the meet of r1 (TCP 80-90 from 10.0.0.0/24) and r1 (TCP 85-100 from 10.0.0.0/25, 10.0.9.0/24) denies TCP 87 from 10.0.0.5")
	}
	// x/b was not isolated for egress in old: new's rule r3 is kept for it, over the
	// addresses of s both have (s is shared with r1, whose meet needs the intersection).
	if !m.AllowsEgress(b, netip.MustParseAddr("10.0.0.5"), TCP, 22) || m.AllowsEgress(b, netip.MustParseAddr("192.168.0.1"), TCP, 22) {
		t.Error("the meet does not keep new's egress rule for x/b, which old did not isolate")
	}
	if m.HasPod(c) {
		t.Error("the meet lists x/c, which only new lists")
	}
}
