package pipeline

import (
	"slices"
	"testing"

	"github.com/kovs-net/kovs/go-controller/pkg/policy"
)

// policyCase is one packet through the reference policy scenario and what must happen to
// it: allowed by exactly rules, or dropped by the default deny (kind) of the pod on
// port denyPort.
type policyCase struct {
	name     string
	pkt      Packet
	ct       CTFlags
	allow    bool
	rules    []string
	denyKind PolicyKind
	denyPort uint32
}

func allowBy(name string, p Packet, rules ...string) policyCase {
	return policyCase{name: name, pkt: p, ct: CTNew, allow: true, rules: rules}
}

func denyBy(name string, p Packet, kind PolicyKind, port uint32) policyCase {
	return policyCase{name: name, pkt: p, ct: CTNew, denyKind: kind, denyPort: port}
}

func reply(c policyCase) policyCase {
	c.name, c.ct, c.allow, c.rules = c.name+" (reply of an allowed connection)", CTEstablished, true, nil
	return c
}

func runPolicyCases(t *testing.T, cases []policyCase) {
	t.Helper()
	share := policyShare()
	tr := policyTracer(t, share)
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := trace(t, tr, c.pkt, c.ct)
			if got := policyVerdict(t, r); got != c.allow {
				t.Fatalf("allowed = %v, want %v:\n%s", got, c.allow, r)
			}
			if !c.allow {
				if kind, port := denyingFlow(r); kind != c.denyKind || port != c.denyPort {
					t.Errorf("dropped by %s of port %d, want %s of port %d:\n%s", kind, port, c.denyKind, c.denyPort, r)
				}
				return
			}
			if got := allowingRules(share, r); !slices.Equal(got, c.rules) {
				t.Errorf("allowed by %v, want %v:\n%s", got, c.rules, r)
			}
		})
	}
}

// TestPolicyIngress: rules per peer and port, the union of two policies that select one
// pod, ranges, named ports, IPv6, a rule whose peers select nothing, and isolation.
func TestPolicyIngress(t *testing.T) {
	pods := policyPods()
	a, b := pods[0], pods[1]
	a4, a6, b4 := podIP(t, a, false), podIP(t, a, true), podIP(t, b, false)
	web0, db0 := "x/web/ingress/0", "x/db/ingress/0"
	runPolicyCases(t, []policyCase{
		allowBy("x/b to x/a tcp/80: x/web and x/db both allow", fromLocal(t, b, a4, IPProtoTCP, 80), db0, web0),
		allowBy("x/r to x/a tcp/80 over the tunnel", fromRemote(2, remoteR4, a4, IPProtoTCP, 80), db0, web0),
		allowBy("x/r to x/a tcp/80 IPv6", fromRemote(2, remoteR6, a6, IPProtoTCP, 80), db0, web0),
		denyBy("y/s to x/a tcp/80: not a client", fromRemote(3, remoteS4, a4, IPProtoTCP, 80), PolicyKindIngressDeny, ofportA),
		denyBy("y/s to x/a tcp/80 IPv6", fromRemote(3, remoteS6, a6, IPProtoTCP, 80), PolicyKindIngressDeny, ofportA),
		denyBy("x/r to x/a udp/80: wrong protocol", fromRemote(2, remoteR4, a4, IPProtoUDP, 80), PolicyKindIngressDeny, ofportA),
		denyBy("x/r to x/a sctp/80", fromRemote(2, remoteR4, a4, IPProtoSCTP, 80), PolicyKindIngressDeny, ofportA),
		allowBy("anyone to x/a tcp/8000, first of the range", fromRemote(3, remoteS4, a4, IPProtoTCP, 8000), "x/web/ingress/1"),
		allowBy("tcp/8063", fromRemote(3, remoteS4, a4, IPProtoTCP, 8063), "x/web/ingress/1"),
		allowBy("tcp/8064", fromRemote(3, remoteS4, a4, IPProtoTCP, 8064), "x/web/ingress/1"),
		allowBy("tcp/8080, last of the range, IPv6", fromRemote(3, remoteS6, a6, IPProtoTCP, 8080), "x/web/ingress/1"),
		denyBy("tcp/7999, below the range", fromRemote(3, remoteS4, a4, IPProtoTCP, 7999), PolicyKindIngressDeny, ofportA),
		denyBy("tcp/8081, above the range", fromRemote(3, remoteS4, a4, IPProtoTCP, 8081), PolicyKindIngressDeny, ofportA),
		denyBy("udp/8000", fromRemote(3, remoteS4, a4, IPProtoUDP, 8000), PolicyKindIngressDeny, ofportA),
		allowBy("x/r to x/a on http (9090 on x/a)", fromRemote(2, remoteR4, a4, IPProtoTCP, 9090), "x/web/ingress/2/tcp-9090"),
		denyBy("y/s to x/a on http", fromRemote(3, remoteS4, a4, IPProtoTCP, 9090), PolicyKindIngressDeny, ofportA),
		denyBy("a rule whose peers select nothing allows nothing", fromRemote(3, remoteS4, a4, IPProtoTCP, 12345),
			PolicyKindIngressDeny, ofportA),
		allowBy("x/r to x/b tcp/80: x/db only", fromRemote(2, remoteR4, b4, IPProtoTCP, 80), db0),
		denyBy("x/r to x/b tcp/8000: x/web's range is not x/b's", fromRemote(2, remoteR4, b4, IPProtoTCP, 8000),
			PolicyKindIngressDeny, ofportB),
		denyBy("y/s to x/b tcp/80", fromRemote(3, remoteS4, b4, IPProtoTCP, 80), PolicyKindIngressDeny, ofportB),
		allowBy("y/s to x/d udp/9: a rule without peers or ports", fromRemote(3, remoteS4, podIP(t, pods[4], false), IPProtoUDP, 9),
			"x/open/ingress/0"),
		allowBy("y/s to y/c: not isolated", fromRemote(3, remoteS4, podIP(t, pods[2], false), IPProtoTCP, 1)),
		reply(denyBy("y/s to x/a tcp/12345", fromRemote(3, remoteS4, a4, IPProtoTCP, 12345), 0, 0)),
	})
}

// TestPolicyEgress: egress rules on the source pod's node, peers by destination address,
// ipBlock with except, IPv6, ports without peers, and a pod isolated for ingress only.
func TestPolicyEgress(t *testing.T) {
	pods := policyPods()
	a, b, c := pods[0], pods[1], pods[2]
	world0, clients1, dns2 := "x/web/egress/0", "x/web/egress/1", "x/web/egress/2"
	runPolicyCases(t, []policyCase{
		allowBy("x/a to 8.8.8.8: ipBlock 0.0.0.0/0", fromLocal(t, a, ip("8.8.8.8"), IPProtoTCP, 443), world0),
		allowBy("x/a to fd00:99::1: ipBlock fd00:99::/64", fromLocal(t, a, ip("fd00:99::1"), IPProtoTCP, 443), world0),
		denyBy("x/a to y/s: 10.0.0.0/8 is excepted", fromLocal(t, a, remoteS4, IPProtoTCP, 443), PolicyKindEgressDeny, ofportA),
		denyBy("x/a to y/s IPv6", fromLocal(t, a, remoteS6, IPProtoTCP, 443), PolicyKindEgressDeny, ofportA),
		allowBy("x/a to x/r, a client, any port", fromLocal(t, a, remoteR4, IPProtoTCP, 443), clients1),
		allowBy("x/a to x/r IPv6", fromLocal(t, a, remoteR6, IPProtoUDP, 7), clients1),
		allowBy("x/a to y/s udp/53", fromLocal(t, a, remoteS4, IPProtoUDP, 53), dns2),
		allowBy("x/a to y/s udp/53 IPv6", fromLocal(t, a, remoteS6, IPProtoUDP, 53), dns2),
		allowBy("x/a to y/s sctp, any port", fromLocal(t, a, remoteS4, IPProtoSCTP, 9999), dns2),
		denyBy("x/a to y/s tcp/53", fromLocal(t, a, remoteS4, IPProtoTCP, 53), PolicyKindEgressDeny, ofportA),
		denyBy("x/a to x/b: egress allows it, x/b's ingress does not", fromLocal(t, a, podIP(t, b, false), IPProtoTCP, 443),
			PolicyKindIngressDeny, ofportB),
		allowBy("x/b to y/s: x/b is isolated for ingress only", fromLocal(t, b, remoteS4, IPProtoTCP, 443)),
		allowBy("y/c to anywhere", fromLocal(t, c, ip("8.8.4.4"), IPProtoUDP, 53)),
		reply(denyBy("x/a to y/s tcp/443", fromLocal(t, a, remoteS4, IPProtoTCP, 443), 0, 0)),
	})
}

// TestPolicyNodeAndPendingPods: the node reaches its pods whatever their policy; a pod
// whose policy has not arrived is closed both ways (but still reachable from its node).
func TestPolicyNodeAndPendingPods(t *testing.T) {
	pods := policyPods()
	a, b, nw := pods[0], pods[1], pods[3]
	a4, a6 := podIP(t, a, false), podIP(t, a, true)
	runPolicyCases(t, []policyCase{
		allowBy("node (gateway address) to isolated x/a", fromNode(ip("10.244.1.1"), a, a4, 12345)),
		allowBy("node (underlay address) to isolated x/a", fromNode(ip("172.31.0.1"), a, a4, 10250)),
		allowBy("node to isolated x/a IPv6", fromNode(ip("fd00:10:244:1::1"), a, a6, 12345)),
		denyBy("x/b to pending x/new", fromLocal(t, b, podIP(t, nw, false), IPProtoTCP, 80), PolicyKindPending, ofportNew),
		denyBy("pending x/new to the world", fromLocal(t, nw, ip("8.8.8.8"), IPProtoTCP, 80), PolicyKindPending, ofportNew),
		allowBy("node to pending x/new", fromNode(ip("10.244.1.1"), nw, podIP(t, nw, false), 80)),
	})
}

// TestPolicyPendingEndsWhenTheShareListsThePod: once the share lists x/new (not
// isolated), it is open; with another UID listed, it stays closed.
func TestPolicyPendingEndsWhenTheShareListsThePod(t *testing.T) {
	pods := policyPods()
	b, nw := pods[1], pods[3]
	pkt := fromLocal(t, b, podIP(t, nw, false), IPProtoTCP, 80)
	for _, tc := range []struct {
		uid   string
		allow bool
	}{{"uid-x-new", true}, {"uid-of-an-older-x-new", false}} {
		share := policyShare()
		share.Pods = append(share.Pods, key("x", "new"))
		share.Pods[len(share.Pods)-1].UID = tc.uid
		slices.SortFunc(share.Pods, policy.PodKey.Compare)
		if got := policyVerdict(t, trace(t, policyTracer(t, share), pkt, CTNew)); got != tc.allow {
			t.Errorf("share lists x/new with UID %s: allowed = %v, want %v", tc.uid, got, tc.allow)
		}
	}
}

// TestPolicyOtherFamilyAddressesNeverMatch: an IPv4-only node gets no flows for IPv6
// peers and ports, and an address set with only IPv6 addresses matches nothing there.
func TestPolicyOtherFamilyAddressesNeverMatch(t *testing.T) {
	sc := oneNodeTwoPods()
	web := sc.pods[0]
	web.UID = "uid-default-web"
	b, err := NewBuilder(sc.node, testRound)
	if err != nil {
		t.Fatal(err)
	}
	share := policyShare()
	webKey := policy.PodKey{Namespace: "default", Name: "web", UID: "uid-default-web"}
	share.AppliedToSets["g-web"] = policy.AppliedToSet{ID: "g-web", Pods: []policy.AppliedPod{{PodKey: webKey, IPs: web.IPs}}}
	share.Pods = []policy.PodKey{webKey}
	for _, f := range b.PolicyFlows(share, []PodPort{web}) {
		if p := f.Match.Protocol(); p == ProtoIPv6 || p == ProtoTCP6 || p == ProtoUDP6 || p == ProtoSCTP6 {
			t.Errorf("IPv4-only node got an IPv6 flow: %s", f)
		}
	}
	share.AddressSets["s-clients"] = policy.AddressSet{ID: "s-clients", Addresses: prefixList("fd00::1/128")}
	rules := 0
	for _, f := range b.PolicyFlows(share, []PodPort{web}) {
		if f.Cookie.PolicyKind() == PolicyKindRule && f.Cookie.Object() == PolicyRuleObjectID("x/web/ingress/0") {
			rules++
		}
	}
	if rules != 0 {
		t.Errorf("a rule whose only peers are IPv6 got %d allow flows on an IPv4-only node", rules)
	}
}
