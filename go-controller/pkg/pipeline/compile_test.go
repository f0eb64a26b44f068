package pipeline

import (
	"maps"
	"net/netip"
	"slices"
	"testing"

	"github.com/kovs-net/kovs/go-controller/pkg/ovs"
	"github.com/kovs-net/kovs/go-controller/pkg/policy"
)

// compilerRig follows one node through changes, as the agent's state does: every change
// makes a new snapshot (slices and maps replaced, never changed in place), and the
// compiler that keeps unchanged objects must give what compiling everything afresh gives.
type compilerRig struct {
	t    *testing.T
	snap Snapshot
	c    *Compiler
}

func newCompilerRig(t *testing.T) *compilerRig {
	sc := policyScenario()
	snap := sc.snapshot()
	snap.Services = map[string][]ServicePort{"default/web": serviceScenarioPorts()[2:4], "default/dns": serviceScenarioPorts()[4:5]}
	return &compilerRig{t: t, snap: snap, c: NewCompiler(Stages())}
}

// compile compiles the current snapshot incrementally, checks it against a fresh
// compilation and returns how many objects it compiled.
func (r *compilerRig) compile(step string) int {
	r.t.Helper()
	got, err := r.c.Compile(r.snap)
	if err != nil {
		r.t.Fatalf("%s: %v", step, err)
	}
	fresh, err := Stages().Compile(r.snap)
	if err != nil {
		r.t.Fatalf("%s: fresh: %v", step, err)
	}
	want := Desire(fresh.Flows, fresh.Groups)
	if !maps.Equal(got.Flows, want.Flows) || !maps.EqualFunc(got.Groups, want.Groups, ovs.Group.Equal) {
		r.t.Fatalf("%s: incremental compilation (%d flows, %d groups) differs from a fresh one (%d, %d)",
			step, len(got.Flows), len(got.Groups), len(want.Flows), len(want.Groups))
	}
	if len(got.Conflicts) > 0 || len(fresh.Conflicts) > 0 {
		r.t.Fatalf("%s: conflicts %v %v", step, got.Conflicts, fresh.Conflicts)
	}
	return got.Compiled
}

// share returns a copy of the snapshot's share to change.
func (r *compilerRig) share() policy.NodeShare { return r.snap.Policy.Clone() }

func (r *compilerRig) setShare(s policy.NodeShare) { r.snap.Policy = &s }

func TestCompilerCompilesOnlyTheObjectsThatChanged(t *testing.T) {
	r := newCompilerRig(t)
	all := r.compile("first compilation")
	if n := r.compile("nothing changed"); n != 0 {
		t.Errorf("nothing changed, %d objects compiled", n)
	}
	if all < 20 {
		t.Fatalf("the scenario has only %d objects", all)
	}
	for _, step := range []struct {
		name   string
		change func()
		want   int
	}{
		{"one pod's port moves (y/c: no policy, no Service)", func() {
			r.snap.Pods = slices.Clone(r.snap.Pods)
			r.snap.Pods[2].MAC = mac("0a:58:0a:f4:01:99")
		}, 1},
		{"one address joins a peer set of one rule", func() {
			s := r.share()
			s.AddressSets["b-v6"] = policy.AddressSet{ID: "b-v6", Addresses: prefixList("fd00:99::/64", "fd00:98::/64")}
			r.setShare(s)
		}, 1},
		{"one rule goes", func() {
			s := r.share()
			delete(s.Rules, "x/web/ingress/1")
			r.setShare(s)
		}, 1}, // its conj_id flow and its port clauses go; x/a's ingress clause carries one conjunction less
		{"one Service's endpoints change", func() {
			r.snap.Services = maps.Clone(r.snap.Services)
			dns := slices.Clone(r.snap.Services["default/dns"])
			dns[0].Internal.Endpoints = dns[0].Internal.Endpoints[:1]
			r.snap.Services["default/dns"] = dns
		}, 1},
		{"a peer comes", func() {
			peer := dualStackNode(4)
			r.snap.Peers = append(slices.Clone(r.snap.Peers), TunnelPeer{NodeName: peer.Name, UnderlayIP: ip("172.31.0.4"),
				PodSubnets: peer.PodSubnets, GatewayMAC: peer.GatewayMAC})
		}, 1},
	} {
		step.change()
		if n := r.compile(step.name); n != step.want {
			t.Errorf("%s: %d objects compiled, want %d", step.name, n, step.want)
		}
	}
	r.snap.Round++
	if n := r.compile("a new round"); n < all-5 {
		t.Errorf("a new round compiled %d objects, want all of them again (about %d)", n, all)
	}
}

// TestCompilerFollowsEveryKindOfChange: pods, peers, Services and policy come and go;
// the incremental compilation always equals the fresh one.
func TestCompilerFollowsEveryKindOfChange(t *testing.T) {
	r := newCompilerRig(t)
	r.compile("start")
	steps := []func(){
		func() { r.snap.Pods = slices.Clone(r.snap.Pods[1:]) }, // x/a, selected by three policies, goes
		func() { r.snap.Pods = append(slices.Clone(r.snap.Pods), policyPods()[0]) },
		func() {
			s := r.share()
			s.AppliedToSets["g-db"] = policy.AppliedToSet{ID: "g-db", Pods: []policy.AppliedPod{refOf(policyPods()[1])}}
			r.setShare(s)
		},
		func() {
			s := r.share()
			s.Pods = append(slices.Clone(s.Pods), key("x", "new"))
			slices.SortFunc(s.Pods, policy.PodKey.Compare)
			r.setShare(s)
		},
		func() {
			s := r.share()
			s.Isolation = policy.Isolation{Ingress: []policy.PodKey{key("x", "b")}}
			r.setShare(s)
		},
		func() { r.snap.Services = map[string][]ServicePort{"default/web": serviceScenarioPorts()[2:4]} },
		func() { r.snap.Services = nil },
		func() { r.snap.Peers = r.snap.Peers[:1] },
		func() { r.snap.Policy = nil },
		func() {
			n := r.snap.Node.clone()
			n.UnderlayIPs = append(n.UnderlayIPs, netip.MustParseAddr("172.31.9.1"))
			r.snap.Node = n
		},
	}
	for i, change := range steps {
		change()
		r.compile("step " + string(rune('a'+i)))
	}
}
