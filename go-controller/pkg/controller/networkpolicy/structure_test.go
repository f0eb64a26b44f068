package networkpolicy

import (
	"encoding/json"
	"fmt"
	"maps"
	"net/netip"
	"reflect"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"

	"github.com/kovs-net/kovs/go-controller/pkg/policy"
)

func TestAddressSetsAreShared(t *testing.T) {
	w := newWorld()
	w.policies = pols(
		policyObj("x", "one", sel("pod=a"), nil, in(from(podPeer(sel("pod=b")))), nil),
		policyObj("x", "two", sel("pod=c"), nil, in(from(podPeer(sel("pod=b")))), nil),
		policyObj("y", "three", sel("pod=a"), nil, in(from(podPeer(sel("pod=b")))), nil),
	)
	share := w.compile()["node-1"]
	one, two, three := share.Rules["x/one/ingress/0"], share.Rules["x/two/ingress/0"], share.Rules["y/three/ingress/0"]
	if len(one.Peers) != 1 || !slices.Equal(one.Peers, two.Peers) {
		t.Errorf("same peers in the same namespace should share one set: %v, %v", one.Peers, two.Peers)
	}
	if slices.Equal(one.Peers, three.Peers) {
		t.Errorf("pod=b in x and in y must be different sets")
	}
	if got := share.AddressSets[one.Peers[0]].Addresses; !slices.Equal(got, []netip.Prefix{netip.MustParsePrefix("10.0.0.2/32")}) {
		t.Errorf("addresses of x pod=b = %v", got)
	}
	// The applied-to set of "pod=a in x" is also the peer set of a policy that allows from it.
	if one.AppliedTo == two.AppliedTo {
		t.Errorf("different applied-to selectors share a set")
	}
}

func TestNodeGetsOnlyItsShare(t *testing.T) {
	w := newWorld()
	w.policies = pols(
		policyObj("x", "b-only", sel("pod=b"), nil, in(from(podPeer(sel("pod=a")))), nil), // x/b is on node-2
		policyObj("y", "a-only", sel("pod=a"), bothTypes(), in(), out(to(blockPeer("8.8.8.8/32")))),
	)
	shares := w.compile()
	n1, n2 := shares["node-1"], shares["node-2"]
	if _, ok := n1.Rules["x/b-only/ingress/0"]; ok {
		t.Error("node-1 got a rule for a pod of node-2")
	}
	if _, ok := n2.Rules["x/b-only/ingress/0"]; !ok {
		t.Error("node-2 lacks the rule of its pod")
	}
	if len(n2.Rules) != 1 || len(n2.AddressSets) != 1 || len(n2.AppliedToSets) != 1 {
		t.Errorf("node-2 share has more than it needs: %+v", n2)
	}
	r := n1.Rules["y/a-only/egress/0"]
	if got := n1.AddressSets[r.Peers[0]].Addresses; !slices.Equal(got, []netip.Prefix{netip.MustParsePrefix("8.8.8.8/32")}) {
		t.Errorf("egress peer set on the source's node = %v", got)
	}
	wantIso := policy.Isolation{
		Ingress: []policy.PodKey{{Namespace: "y", Name: "a", UID: "uid-y-a"}},
		Egress:  []policy.PodKey{{Namespace: "y", Name: "a", UID: "uid-y-a"}},
	}
	if !n1.Isolation.Equal(wantIso) {
		t.Errorf("node-1 isolation = %+v, want %+v", n1.Isolation, wantIso)
	}
	if !n2.Isolation.Equal(policy.Isolation{Ingress: []policy.PodKey{{Namespace: "x", Name: "b", UID: "uid-x-b"}}}) {
		t.Errorf("node-2 isolation = %+v", n2.Isolation)
	}
}

func TestNamedPortSplit(t *testing.T) {
	w := newWorld()
	w.policies = pols(
		policyObj("x", "in", &metav1.LabelSelector{}, nil,
			in(networkingv1.NetworkPolicyIngressRule{Ports: ports("http", "tcp/80")}), nil),
		policyObj("y", "out", sel("pod=c"), egressOnly(), nil,
			out(networkingv1.NetworkPolicyEgressRule{Ports: ports("http"), To: []networkingv1.NetworkPolicyPeer{nsPeer(sel("ns=x"))}})),
	)
	shares := w.compile()
	n1 := shares["node-1"] // x/a, x/c, y/c
	numeric := n1.Rules["x/in/ingress/0"]
	if !slices.Equal(numeric.Ports, []policy.Port{{Protocol: policy.TCP, Port: 80}}) {
		t.Errorf("numeric part = %+v", numeric)
	}
	split := n1.Rules["x/in/ingress/0/tcp-8080"]
	if got := n1.AppliedToSets[split.AppliedTo].Pods; len(got) != 1 || got[0].Name != "a" {
		t.Errorf("tcp-8080 applies to %+v, want x/a only", got)
	}
	if _, ok := n1.Rules["x/in/ingress/0/tcp-9090"]; ok {
		t.Error("node-1 got the 9090 split though its pods do not resolve http to 9090")
	}
	if _, ok := shares["node-2"].Rules["x/in/ingress/0/tcp-9090"]; !ok {
		t.Error("node-2 lacks the 9090 split of x/b")
	}
	e8080, e9090 := n1.Rules["y/out/egress/0/tcp-8080"], n1.Rules["y/out/egress/0/tcp-9090"]
	addrs := func(r policy.Rule) []netip.Prefix { return n1.AddressSets[r.Peers[0]].Addresses }
	if !slices.Equal(addrs(e8080), []netip.Prefix{netip.MustParsePrefix("10.0.0.1/32")}) ||
		!slices.Equal(addrs(e9090), []netip.Prefix{netip.MustParsePrefix("10.0.0.2/32")}) {
		t.Errorf("egress splits: 8080 -> %v, 9090 -> %v", addrs(e8080), addrs(e9090))
	}
}

func TestIPBlockExceptIsSubtracted(t *testing.T) {
	w := newWorld()
	w.policies = pols(policyObj("x", "np", sel("pod=a"), nil, in(from(blockPeer("10.0.0.0/22", "10.0.1.0/24"))), nil))
	share := w.compile()["node-1"]
	r := share.Rules["x/np/ingress/0"]
	want := []netip.Prefix{netip.MustParsePrefix("10.0.0.0/24"), netip.MustParsePrefix("10.0.2.0/23")}
	if got := share.AddressSets[r.Peers[0]].Addresses; !slices.Equal(got, want) {
		t.Errorf("ipBlock addresses = %v, want %v", got, want)
	}
}

func TestPodWithoutAddressesIsAppliedTo(t *testing.T) {
	w := newWorld()
	w.pod("x/a").Status.PodIPs = nil
	w.policies = pols(policyObj("x", "np", sel("pod=a"), nil, in(from(podPeer(sel("pod=a")))), nil))
	share := w.compile()["node-1"]
	r := share.Rules["x/np/ingress/0"]
	pods := share.AppliedToSets[r.AppliedTo].Pods
	if len(pods) != 1 || pods[0].Name != "a" || pods[0].UID != "uid-x-a" || len(pods[0].IPs) != 0 {
		t.Errorf("applied-to pods = %+v, want x/a without addresses", pods)
	}
	if got := share.AddressSets[r.Peers[0]].Addresses; len(got) != 0 {
		t.Errorf("a pod without addresses contributed %v", got)
	}
}

func TestCompileIsDeterministic(t *testing.T) {
	build := func() []byte {
		w := newWorld()
		w.policies = pols(
			policyObj("x", "np", &metav1.LabelSelector{}, bothTypes(),
				in(networkingv1.NetworkPolicyIngressRule{Ports: ports("http", "udp/53"), From: []networkingv1.NetworkPolicyPeer{
					nsPeer(sel("ns=y")), podPeer(sel("pod=b")), blockPeer("1.0.0.0/8", "1.1.0.0/16")}}),
				out(to(bothPeer(&metav1.LabelSelector{}, sel("pod=c"))))))
		b, err := json.Marshal(w.compile())
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	if a, b := build(), build(); !reflect.DeepEqual(a, b) {
		t.Errorf("two compiles of the same objects differ:\n%s\n%s", a, b)
	}
}

// TestPodChangeEvaluatesOnlyCandidateGroups checks the index: a pod is evaluated against
// the groups of its own namespace and the groups with a namespaceSelector, never against
// the groups of other namespaces.
func TestPodChangeEvaluatesOnlyCandidateGroups(t *testing.T) {
	w := newWorld()
	w.policies = pols(
		policyObj("x", "a", sel("pod=a"), nil, in(from(podPeer(sel("pod=b")))), nil),
		policyObj("y", "a", sel("pod=a"), nil, in(from(podPeer(sel("pod=c")))), nil),
		policyObj("z", "a", sel("pod=a"), nil, in(from(nsPeer(sel("ns=x")))), nil),
	)
	m := w.model()
	m.commit()
	var candidates []string
	m.eachCandidate(m.namespaces["x"], func(g *group) { candidates = append(candidates, g.key().String()) })
	slices.Sort(candidates)
	want := []string{"n:x|p:pod=a", "n:x|p:pod=b", "s:ns=x|p:"}
	if !slices.Equal(candidates, want) {
		t.Errorf("candidate groups of a pod in x = %v, want %v", candidates, want)
	}
}

// TestAddressPatchesReachTheNodesHoldingTheSet checks the index of the nodes holding an
// address set as nodes gain and lose the set: a change of its addresses patches every
// watched node that holds it, and only those.
func TestAddressPatchesReachTheNodesHoldingTheSet(t *testing.T) {
	m := newModel()
	m.setNamespace("x", namespaceObj("x"))
	peer := podObj("x", "b", "node-3", "pod=b")
	readdress := func(last byte) {
		peer = peer.DeepCopy()
		peer.Status.PodIPs = []corev1.PodIP{{IP: fmt.Sprint("10.0.0.", last)}}
		m.setPod(podKey(peer), peer)
	}
	readdress(1)
	m.setPod(types.NamespacedName{Namespace: "x", Name: "a1"}, podObj("x", "a1", "node-1", "pod=a"))
	np := policyObj("x", "np", sel("pod=a"), nil, in(from(podPeer(sel("pod=b")))), nil)
	m.setPolicy(objectKey(np), np)
	m.commit()
	subs := map[string]*subscriber{}
	for _, node := range []string{"node-1", "node-2", "node-3"} {
		subs[node], _ = m.subscribe(node)
	}
	patched := func(step string, want ...string) {
		t.Helper()
		m.commit()
		for node, s := range subs {
			d, _ := m.delta(s)
			got := len(d.UpdatedAddressSets) == 1
			if got != slices.Contains(want, node) {
				t.Errorf("%s: %s patched the peer set: %v, want %v (delta %+v)", step, node, got, !got, d)
			}
		}
	}
	readdress(2)
	patched("peer readdressed", "node-1")
	m.setPod(types.NamespacedName{Namespace: "x", Name: "a2"}, podObj("x", "a2", "node-2", "pod=a"))
	m.commit()
	for _, s := range subs {
		m.delta(s)
	}
	readdress(3)
	patched("peer readdressed after node-2 gained the set", "node-1", "node-2")
	m.setPod(types.NamespacedName{Namespace: "x", Name: "a1"}, nil)
	m.commit()
	for _, s := range subs {
		m.delta(s)
	}
	readdress(4)
	patched("peer readdressed after node-1 lost the set", "node-2")
}

// TestNamespaceSelectorIndexFollowsGroupsAndLabels checks the index of the groups with a
// namespaceSelector: a relabelled namespace's pods leave and join the groups it stops and
// starts matching, and a pod never joins a group that was deleted.
func TestNamespaceSelectorIndexFollowsGroupsAndLabels(t *testing.T) {
	w := newWorld()
	fromX := policyObj("z", "from-x", sel("pod=a"), nil, in(from(nsPeer(sel("ns=x")))), nil)
	w.policies = pols(fromX)
	m := w.model()
	m.commit()
	members := func(nsKey string) []string {
		t.Helper()
		var names []string
		for key, g := range m.groups {
			if key.cluster && key.scope == nsKey {
				g.members.each(func(p *pod) { names = append(names, p.key.String()) })
			}
		}
		slices.Sort(names)
		return names
	}
	xPods := []string{"x/a", "x/b", "x/c"}
	if got := members("ns=x"); !slices.Equal(got, xPods) {
		t.Fatalf("group ns=x = %v, want %v", got, xPods)
	}
	m.setNamespace("x", namespaceObj("x", "ns=w"))
	m.commit()
	if got := members("ns=x"); len(got) != 0 {
		t.Errorf("after x is relabelled ns=w, group ns=x = %v, want none", got)
	}
	m.setNamespace("x", namespaceObj("x", "ns=x"))
	m.commit()
	if got := members("ns=x"); !slices.Equal(got, xPods) {
		t.Errorf("after x is labelled ns=x again, group ns=x = %v, want %v", got, xPods)
	}
	m.setPolicy(objectKey(fromX), nil)
	m.commit()
	p := podObj("x", "d", "node-1", "pod=d")
	m.setPod(podKey(p), p)
	m.commit()
	for _, g := range m.pods[podKey(p)].groups {
		if m.groups[g.key()] != g {
			t.Errorf("new pod x/d joined the deleted group %s", g.key())
		}
	}
}

// TestGroupAddressesFollowMembers checks the counts behind a group's address set: an
// address two members share stays until both are gone, a change undone within a batch
// patches nothing, and the set's list and the patches of a node that holds it follow
// readdressed and relabelled members.
func TestGroupAddressesFollowMembers(t *testing.T) {
	m := newModel()
	m.setNamespace("x", namespaceObj("x"))
	set := func(name, label, ip string) {
		p := podObj("x", name, "node-2", label)
		if ip != "" {
			p.Status.PodIPs = []corev1.PodIP{{IP: ip}}
		}
		m.setPod(podKey(p), p)
	}
	set("a", "pod=a", "10.0.0.1")
	for i := range countedMin { // enough addresses for the set to count them
		set(fmt.Sprint("filler-", i), "pod=b", fmt.Sprintf("10.1.%d.%d", i/256, i%256))
	}
	set("b1", "pod=b", "10.0.0.9")
	set("b2", "pod=b", "10.0.0.9")
	set("b3", "pod=b", "10.0.0.3")
	np := policyObj("x", "np", sel("pod=a"), nil, in(from(podPeer(sel("pod=b")))), nil)
	m.setPolicy(objectKey(np), np)
	m.commit()
	s, _ := m.subscribe("node-2")
	peers := m.groups[groupKey{scope: "x", pods: "pod=b"}].addr
	if peers.count == nil {
		t.Fatalf("a set of %d addresses does not count them", len(peers.list()))
	}
	step := func(what string, wantList []string, wantAdded, wantRemoved []string) {
		t.Helper()
		m.commit()
		var list []netip.Prefix
		for _, p := range peers.list() {
			if netip.MustParsePrefix("10.0.0.0/24").Overlaps(p) {
				list = append(list, p)
			}
		}
		if got := fmt.Sprint(list); got != fmt.Sprint(prefixes(wantList...)) {
			t.Errorf("%s: set %v, want %v", what, got, wantList)
		}
		d, _ := m.delta(s)
		var added, removed []netip.Prefix
		for _, p := range d.UpdatedAddressSets {
			added, removed = p.Added, p.Removed
		}
		if fmt.Sprint(added, removed) != fmt.Sprint(prefixes(wantAdded...), prefixes(wantRemoved...)) {
			t.Errorf("%s: patch +%v -%v, want +%v -%v", what, added, removed, wantAdded, wantRemoved)
		}
	}
	step("at first", []string{"10.0.0.3", "10.0.0.9"}, nil, nil)
	m.setPod(types.NamespacedName{Namespace: "x", Name: "b1"}, nil)
	step("one of two pods of 10.0.0.9 deleted", []string{"10.0.0.3", "10.0.0.9"}, nil, nil)
	set("b3", "pod=b", "10.0.0.4")
	set("b3", "pod=b", "10.0.0.3")
	step("b3 readdressed and back in one batch", []string{"10.0.0.3", "10.0.0.9"}, nil, nil)
	set("b2", "pod=b", "10.0.0.5")
	step("b2 readdressed", []string{"10.0.0.3", "10.0.0.5"}, []string{"10.0.0.5"}, []string{"10.0.0.9"})
	set("b3", "pod=c", "10.0.0.3")
	step("b3 relabelled out", []string{"10.0.0.5"}, nil, []string{"10.0.0.3"})
	set("b2", "pod=b", "")
	step("b2 without an address", nil, nil, []string{"10.0.0.5"})
}

func prefixes(ips ...string) []netip.Prefix {
	var out []netip.Prefix
	for _, ip := range ips {
		out = append(out, policy.HostPrefix(netip.MustParseAddr(ip)))
	}
	return out
}

// TestNewSelectorGroupFindsNamespacesByTheirCurrentLabels checks the index of namespaces
// by label that fills a new group with a namespaceSelector: after x is relabelled, a new
// group selecting its new label has x's pods and one selecting its old label has none,
// and a deleted namespace's pods are in no new group that requires a label.
func TestNewSelectorGroupFindsNamespacesByTheirCurrentLabels(t *testing.T) {
	w := newWorld()
	m := w.model()
	m.commit()
	m.setNamespace("x", namespaceObj("x", "ns=w"))
	m.setNamespace("y", nil)
	m.commit()
	members := func(name string, nsSelector *metav1.LabelSelector) []string {
		t.Helper()
		np := policyObj("z", name, sel("pod=a"), nil, in(from(nsPeer(nsSelector))), nil)
		m.setPolicy(objectKey(np), np)
		m.commit()
		nsSel, nsKey, err := m.selectors.parse(nsSelector)
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		m.groups[groupSpec{nsSelector: nsSel, nsKey: nsKey, selector: labels.Everything()}.key()].members.each(func(p *pod) {
			names = append(names, p.key.String())
		})
		slices.Sort(names)
		return names
	}
	if got, want := members("from-w", sel("ns=w")), []string{"x/a", "x/b", "x/c"}; !slices.Equal(got, want) {
		t.Errorf("new group ns=w = %v, want %v", got, want)
	}
	if got := members("from-x", sel("ns=x")); len(got) != 0 {
		t.Errorf("new group ns=x = %v, want none (x is ns=w now)", got)
	}
	if got := members("from-y", expr("ns", metav1.LabelSelectorOpIn, "y", "z")); !slices.Equal(got, []string{"z/a", "z/b", "z/c"}) {
		t.Errorf("new group ns in (y, z) = %v, want z's pods only (y was deleted)", got)
	}
}

// TestNamedPortCountsFollowMembers checks the counts of the numbers a group's members
// give named ports (portCount), over an applied-to group, a namespaceSelector peer and
// an ipBlock peer: the splits follow members that join, leave, are relabelled,
// readdressed out of the block or whose namespace is relabelled, and policies that stop
// naming ports; a member readdressed
// within its groups marks no policy to be compiled again; and after every batch each
// count equals a count over the group's members and lists exactly the policies compiled
// with it.
func TestNamedPortCountsFollowMembers(t *testing.T) {
	m := newModel()
	m.setNamespace("x", namespaceObj("x", "ns=x"))
	m.setNamespace("y", namespaceObj("y", "ns=y"))
	pods := map[string]*corev1.Pod{}
	set := func(name, node, label, ip string, number int32) {
		p := podObj("x", name, node, label)
		if old := pods[name]; old != nil {
			p.Spec.Containers = old.Spec.Containers // a pod's ports stay while it keeps its UID
		} else {
			p.Spec.Containers = []corev1.Container{{Name: "c", Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: number}}}}
		}
		p.Status.PodIPs = []corev1.PodIP{{IP: ip}}
		pods[name] = p
		m.setPod(podKey(p), p)
	}
	del := func(name string) {
		m.setPod(podKey(pods[name]), nil)
		delete(pods, name)
	}
	set("a1", "node-1", "app=web", "10.0.0.1", 8080)
	set("a2", "node-2", "app=web", "10.0.0.2", 8080)
	for _, np := range []*networkingv1.NetworkPolicy{
		policyObj("x", "in", sel("app=web"), nil, in(networkingv1.NetworkPolicyIngressRule{Ports: ports("http")}), nil),
		policyObj("y", "out", sel(), egressOnly(), nil,
			out(networkingv1.NetworkPolicyEgressRule{Ports: ports("http"), To: []networkingv1.NetworkPolicyPeer{nsPeer(sel("ns=x"))}})),
		policyObj("y", "blk", sel(), egressOnly(), nil,
			out(networkingv1.NetworkPolicyEgressRule{Ports: ports("http"), To: []networkingv1.NetworkPolicyPeer{blockPeer("10.0.0.0/24")}})),
	} {
		m.setPolicy(objectKey(np), np)
	}
	m.setPod(types.NamespacedName{Namespace: "y", Name: "client"}, podObj("y", "client", "node-3", "app=client"))
	step := func(what string, want ...string) {
		t.Helper()
		m.commit()
		got := map[string]bool{}
		for _, n := range m.nodes {
			for id := range m.snapshot(n).Rules {
				if strings.Contains(id, "/tcp-") {
					got[id] = true
				}
			}
		}
		if ids := slices.Sorted(maps.Keys(got)); !slices.Equal(ids, want) {
			t.Errorf("%s: named-port splits %v, want %v", what, ids, want)
		}
		checkPortCounts(t, what, m)
	}
	step("at first", "x/in/ingress/0/tcp-8080", "y/blk/egress/0/tcp-8080", "y/out/egress/0/tcp-8080")
	set("a1", "node-1", "app=web", "10.0.0.11", 0)
	if len(m.batch.dirtyPolicies) != 0 {
		t.Errorf("a member readdressed within its groups marked %d policies to be compiled again", len(m.batch.dirtyPolicies))
	}
	step("a1 readdressed", "x/in/ingress/0/tcp-8080", "y/blk/egress/0/tcp-8080", "y/out/egress/0/tcp-8080")
	set("a3", "node-1", "app=web", "10.0.0.3", 9090)
	step("a3 serving http on 9090 created", "x/in/ingress/0/tcp-8080", "x/in/ingress/0/tcp-9090",
		"y/blk/egress/0/tcp-8080", "y/blk/egress/0/tcp-9090", "y/out/egress/0/tcp-8080", "y/out/egress/0/tcp-9090")
	set("a3", "node-1", "app=db", "10.0.0.3", 0)
	step("a3 relabelled out of app=web", "x/in/ingress/0/tcp-8080",
		"y/blk/egress/0/tcp-8080", "y/blk/egress/0/tcp-9090", "y/out/egress/0/tcp-8080", "y/out/egress/0/tcp-9090")
	set("a3", "node-1", "app=db", "10.9.0.3", 0)
	step("a3 readdressed out of the block", "x/in/ingress/0/tcp-8080",
		"y/blk/egress/0/tcp-8080", "y/out/egress/0/tcp-8080", "y/out/egress/0/tcp-9090")
	del("a1")
	step("a1 deleted, a2 still serves 8080", "x/in/ingress/0/tcp-8080",
		"y/blk/egress/0/tcp-8080", "y/out/egress/0/tcp-8080", "y/out/egress/0/tcp-9090")
	del("a2")
	step("a2 deleted", "y/out/egress/0/tcp-9090")
	m.setNamespace("x", namespaceObj("x", "ns=w"))
	step("x relabelled ns=w")
	m.setNamespace("x", namespaceObj("x", "ns=x"))
	set("a4", "node-2", "app=web", "10.0.0.4", 8080)
	step("x labelled ns=x again and a4 serving 8080 created", "x/in/ingress/0/tcp-8080",
		"y/blk/egress/0/tcp-8080", "y/out/egress/0/tcp-8080", "y/out/egress/0/tcp-9090")
	m.setPolicy(types.NamespacedName{Namespace: "y", Name: "out"}, nil)
	step("y/out deleted", "x/in/ingress/0/tcp-8080", "y/blk/egress/0/tcp-8080")
	numeric := policyObj("x", "in", sel("app=web"), nil, in(networkingv1.NetworkPolicyIngressRule{Ports: ports("tcp/80")}), nil)
	m.setPolicy(objectKey(numeric), numeric) // its applied-to group stays, its named ports go
	step("x/in on port 80 only", "y/blk/egress/0/tcp-8080")
}

// checkPortCounts checks every group's counts of named-port numbers against a count over
// its members, and their users against the policies compiled with them.
func checkPortCounts(t *testing.T, what string, m *model) {
	t.Helper()
	users := map[*portCount]map[*policyState]struct{}{}
	for _, ps := range m.policies {
		for _, u := range ps.portUses {
			if u.count.base.portCounts[u.count.key] != u.count {
				t.Errorf("%s: policy %s was compiled with a count its group %s no longer has", what, ps.key, u.count.base.key())
			}
			if users[u.count] == nil {
				users[u.count] = map[*policyState]struct{}{}
			}
			users[u.count][ps] = struct{}{}
		}
	}
	for key, g := range m.groups {
		for _, pc := range g.portCounts {
			want := map[int32]int32{}
			g.members.each(func(p *pod) {
				for _, n := range p.appendResolved(nil, pc.ports.protocol, pc.ports.names) {
					want[n]++
				}
			})
			if !maps.Equal(pc.count, want) {
				t.Errorf("%s: group %s counts %s as %v, its members give %v", what, key, pc.key, pc.count, want)
			}
			if got := pc.sorted(); !slices.Equal(got, slices.Sorted(maps.Keys(want))) {
				t.Errorf("%s: group %s lists the numbers of %s as %v, its members give %v", what, key, pc.key, got, want)
			}
			if len(pc.users) == 0 {
				t.Errorf("%s: group %s keeps a count of %s that no policy uses", what, key, pc.key)
			}
			if !maps.Equal(pc.users, users[pc]) {
				t.Errorf("%s: group %s's count of %s has %d users, %d policies were compiled with it", what, key, pc.key, len(pc.users), len(users[pc]))
			}
			delete(users, pc)
		}
	}
	for pc := range users {
		t.Errorf("%s: a count of %s is used by policies but held by no group", what, pc.key)
	}
}
