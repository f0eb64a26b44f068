package sandbox

import "testing"

// TestNodesAreSpreadOverThreeZones: nodes take zone-a, zone-b, zone-c in turn, and a real
// node's kubelet is told its zone (the emulator sets the one in the state).
func TestNodesAreSpreadOverThreeZones(t *testing.T) {
	l, _ := NewLayout("t", "/tmp")
	nodes := planNodes(l, 4, IPv4)
	for i, want := range []string{"zone-a", "zone-b", "zone-c", "zone-a"} {
		if nodes[i].Zone != want {
			t.Errorf("%s is in zone %q, want %q", nodes[i].Name, nodes[i].Zone, want)
		}
	}
	u := &upRun{layout: l, state: &State{Family: IPv4, Nodes: nodes}}
	if got, ok := flagValue(u.kubeletArgs(nodes[1]), "--node-labels"); !ok || got != "topology.kubernetes.io/zone=zone-b" {
		t.Errorf("kubelet of %s gets --node-labels %q, want its zone label", nodes[1].Name, got)
	}
	if _, ok := flagValue(u.kubeletArgs(Node{Name: "old"}), "--node-labels"); ok {
		t.Errorf("a node of a state saved without zones gets a zone label")
	}
}
