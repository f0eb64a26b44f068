package egressip

import (
	"net/netip"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kovs-net/kovs/go-controller/pkg/egress"
)

var (
	underlay = []netip.Prefix{netip.MustParsePrefix("172.30.0.0/24")}
	cluster  = []netip.Prefix{netip.MustParsePrefix("10.244.0.0/16")}
)

func eg(name, ip, node string, id uint32) *egress.Egress {
	e := &egress.Egress{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: egress.Spec{EgressIPs: []string{ip},
		PodSelector:  &metav1.LabelSelector{MatchLabels: map[string]string{"app": name}},
		NodeSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"egress": "yes"}}}}
	e.Status.Node, e.Status.ID = node, id
	return e
}

func node(name string, healthy, allowed bool) Node {
	n := Node{Name: name, Healthy: healthy, CIDRs: underlay, Labels: map[string]string{}}
	if allowed {
		n.Labels["egress"] = "yes"
	}
	return n
}

func TestAssignKeepsHealthyHoldersAndMovesFailedOnes(t *testing.T) {
	nodes := []Node{node("n1", true, true), node("n2", true, true), node("n3", true, false)}
	d := Assign([]*egress.Egress{eg("a", "172.30.0.100", "", 0), eg("b", "172.30.0.101", "", 0)}, nodes, cluster)
	if d[0].Status != (Holder{Node: "n1", ID: 1}) || d[1].Status != (Holder{Node: "n2", ID: 2}) || !d[0].Assigned {
		t.Fatalf("first assignment spreads over eligible nodes: %+v", d)
	}
	// n1 fails: a moves to n2 (the only other eligible node), keeping its ID; b stays.
	nodes[0].Healthy = false
	d = Assign([]*egress.Egress{eg("a", "172.30.0.100", "n1", 1), eg("b", "172.30.0.101", "n2", 2)}, nodes, cluster)
	if d[0].Status != (Holder{Node: "n2", ID: 1}) || d[1].Status != (Holder{Node: "n2", ID: 2}) {
		t.Fatalf("after n1 failed: %+v", d)
	}
	// n1 comes back: nobody moves back.
	nodes[0].Healthy = true
	d = Assign([]*egress.Egress{eg("a", "172.30.0.100", "n2", 1), eg("b", "172.30.0.101", "n2", 2)}, nodes, cluster)
	if d[0].Status.Node != "n2" || d[1].Status.Node != "n2" {
		t.Fatalf("holders moved although healthy: %+v", d)
	}
	// No eligible node at all.
	d = Assign([]*egress.Egress{eg("a", "172.30.0.100", "n2", 1)}, []Node{node("n2", false, true), node("n3", true, false)}, cluster)
	if d[0].Assigned || d[0].Status.Node != "" || d[0].Reason != egress.ReasonNoNode || d[0].Status.ID != 1 {
		t.Fatalf("no eligible node: %+v", d)
	}
}

func TestAssignRefusesBadAndConflictingEgresses(t *testing.T) {
	nodes := []Node{node("n1", true, true)}
	nodes[0].Addresses = []netip.Addr{netip.MustParseAddr("172.30.0.1")}
	noSel := eg("c", "172.30.0.102", "", 0)
	noSel.Spec.PodSelector = nil
	d := Assign([]*egress.Egress{eg("a", "172.30.0.100", "", 0), eg("b", "172.30.0.100", "", 0), noSel,
		eg("d", "10.244.1.1", "", 0), eg("e", "172.30.0.1", "", 0), eg("f", "192.168.1.1", "", 0)}, nodes, cluster)
	want := map[string]string{"a": egress.ReasonAssigned, "b": egress.ReasonConflict, "c": egress.ReasonInvalid,
		"d": egress.ReasonInvalid, "e": egress.ReasonConflict, "f": egress.ReasonNoNode}
	for _, x := range d {
		if x.Reason != want[x.Name] {
			t.Errorf("%s: reason %s (%s), want %s", x.Name, x.Reason, x.Message, want[x.Name])
		}
	}
}
