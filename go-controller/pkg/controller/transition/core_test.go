package transition

import (
	"flag"
	"fmt"
	"math"
	"math/rand/v2"
	"net/netip"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/kovs-net/kovs/go-controller/pkg/controller/networkpolicy"
	"github.com/kovs-net/kovs/go-controller/pkg/policy"
)

var seedFlag = flag.Uint64("transition.seed", 0, "seed of TestNoWindowAcrossNodes (0: a new one, printed)")

// The guarantee, checked against the model and not the datapath: random sequences of API
// writes (policies created, changed and deleted, pods relabelled, created and deleted) are
// compiled from scratch after every write (networkpolicy.Compile, the reference the
// incremental compiler is tested against); a fake compiler hands the gate cuts of those
// states, and simulated agents realize what the gate sends them at random moments, in
// every order. After every event, every connection between the pods is checked against
// every combination of shares its two nodes may have in force (the last one each
// reported realized, or any sent after it): if one combination lets it through, some
// state the API passed through since the oldest of those shares must have allowed it.
//
// Once in a while the controller fails over: a new gate, knowing nothing, takes over while
// the agents keep what they enforce; the agents meet their first share of it with that,
// as kovs-agent does (MeetPrevious), until the gate releases them.
//
// The same check without the gate (every cut sent as compiled), and with the gate but
// agents that ignore MeetPrevious, must find violations: otherwise the test could not
// fail.
func TestNoWindowAcrossNodes(t *testing.T) {
	seed := testSeed(t)
	const runs = 300
	variants := []struct {
		name            string
		gate, meetFirst bool
	}{{"the gate", true, true}, {"no gate", false, true}, {"agents that ignore MeetPrevious", true, false}}
	violations := make([]int, len(variants))
	checks, ahead := 0, 0
	for i := range runs {
		for v, variant := range variants {
			sim := newSimulation(rand.New(rand.NewPCG(seed, uint64(i))), variant.gate, variant.meetFirst)
			n, c := sim.run(t, 14)
			checks += c
			violations[v] += n
			if v == 0 {
				ahead += sim.releasedAhead + sim.core.releasedAhead
			}
			if v == 0 && n > 0 {
				t.Errorf("run %d (seed %d): %d connections let through that no state since allowed; first: %s", i, seed, n, sim.first)
			}
		}
	}
	t.Logf("%d runs, %d connection checks: violations with %s %d, with %s %d, with %s %d; relaxations the gate sent ahead of a later restriction: %d",
		runs, checks, variants[0].name, violations[0], variants[1].name, violations[1], variants[2].name, violations[2], ahead)
	if ahead == 0 {
		t.Error("no run sent a relaxation while a later restriction was not realized: the runs do not try the gate's epochs")
	}
	for v := 1; v < len(variants); v++ {
		if violations[v] == 0 {
			t.Errorf("with %s no run found a window: the check cannot fail", variants[v].name)
		}
	}
}

// TestNoWindowWhileRelaxationsWait is TestNoWindowAcrossNodes with one gate throughout
// and longer runs: relaxations wait while later cuts restrict, and go out ahead of those
// restrictions once the ones before them are realized (the gate's epochs), which the
// short runs with failovers make seldom.
func TestNoWindowWhileRelaxationsWait(t *testing.T) {
	seed := testSeed(t)
	const runs = 600
	violations, checks, ahead := 0, 0, 0
	for i := range runs {
		sim := newSimulation(rand.New(rand.NewPCG(seed, uint64(i))), true, true)
		sim.steady = true
		n, c := sim.run(t, 60)
		violations, checks, ahead = violations+n, checks+c, ahead+sim.core.releasedAhead
		if n > 0 {
			t.Errorf("run %d (seed %d): %d connections let through that no state since allowed; first: %s", i, seed, n, sim.first)
		}
	}
	t.Logf("%d runs, %d connection checks, %d violations; relaxations sent ahead of a later restriction: %d", runs, checks, violations, ahead)
	if ahead < runs/4 {
		t.Errorf("%d relaxations sent ahead of a later restriction in %d runs: the runs hardly try the gate's epochs", ahead, runs)
	}
}

// testSeed is -transition.seed, or a new seed; it is logged.
func testSeed(t *testing.T) uint64 {
	seed := *seedFlag
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	t.Logf("seed %d (rerun with -transition.seed %d)", seed, seed)
	return seed
}

// simulation is a cluster of three nodes under random writes, realizations and failovers.
type simulation struct {
	rng       *rand.Rand
	withGate  bool
	meetFirst bool // agents honour MeetPrevious
	pods      map[string]*corev1.Pod
	policies  map[string]*networkingv1.NetworkPolicy
	// cluster are the ClusterNetworkPolicies, one rule each, by name.
	cluster map[string]simClusterPolicy
	states  []map[string]policy.NodeShare // after every write
	src     *fakeSource
	core    *core
	agents  map[string]*agent
	first   string
	serial  int
	// gone are the pods deleted since the gate's last cut.
	gone policy.Gone
	// releasedAhead is what the gates before the last failover counted (core's).
	releasedAhead int
	// steady: no failover, one gate throughout.
	steady bool
	// now is the simulated clock: it moves on by up to 600 ms a step, so that the gate
	// both takes cuts while relaxations wait and stops taking them (but never reaches its
	// timeout of a minute).
	now time.Time
}

// agent is a simulated node agent: the share it received, the floor it meets it with
// (after a MeetPrevious snapshot), the versions it enforced in order, and the index of
// the last one it reported realized.
type agent struct {
	r        *receiver
	received policy.NodeShare
	floor    *sentShare
	sent     []sentShare
	realized int
}

type sentShare struct {
	share policy.NodeShare
	cut   int // the API state of the cut that produced it
}

var nodes = []string{"node-1", "node-2", "node-3"}

func newSimulation(rng *rand.Rand, withGate, meetFirst bool) *simulation {
	s := &simulation{rng: rng, withGate: withGate, meetFirst: meetFirst, pods: map[string]*corev1.Pod{}, now: time.Unix(0, 0),
		policies: map[string]*networkingv1.NetworkPolicy{}, cluster: map[string]simClusterPolicy{}, agents: map[string]*agent{}}
	for i, ns := range []string{"x", "y"} {
		for j, name := range []string{"a", "b", "c"} {
			s.setPod(ns, name, nodes[(i+j)%3], fmt.Sprintf("10.0.%d.%d", i, j+1))
		}
	}
	s.states = append(s.states, s.compile())
	for _, n := range nodes {
		s.agents[n] = &agent{}
	}
	s.failover(100)
	for _, n := range nodes {
		a := s.agents[n]
		s.core.realized(n, a.sent[0].share.Generation)
	}
	return s
}

// failover starts a new gate, with generations from base, that the agents connect to.
func (s *simulation) failover(base uint64) {
	prev := len(s.states) - 1
	if s.core != nil {
		s.releasedAhead += s.core.releasedAhead
	}
	s.src = &fakeSource{sim: s}
	s.core = newCore(s.src, base, time.Minute)
	for _, n := range nodes {
		s.core.adds[n] = struct{}{}
	}
	s.step()
	for _, n := range nodes {
		st, a := s.core.nodes[n], s.agents[n]
		a.r = newReceiver(st.sent.Generation)
		st.receivers = append(st.receivers, a.r)
		a.received = st.sent.Clone()
		a.received.MeetPrevious = st.floor != 0
		switch {
		case len(a.sent) == 0:
		case a.received.MeetPrevious && s.meetFirst:
			f := a.sent[len(a.sent)-1]
			a.floor = &f
		default:
			a.floor = nil
		}
		a.enforce(prev)
	}
}

// enforce appends what the agent enforces of its received share.
func (a *agent) enforce(cut int) {
	if a.floor == nil {
		a.sent = append(a.sent, sentShare{share: a.received.Clone(), cut: cut})
		return
	}
	a.sent = append(a.sent, sentShare{share: policy.Meet(a.floor.share, a.received), cut: min(cut, a.floor.cut)})
}

func (s *simulation) setPod(ns, name, node, ip string) {
	s.serial++
	s.pods[ns+"/"+name] = &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID(fmt.Sprint("uid-", s.serial)),
			Labels: map[string]string{"app": s.pick("web", "db")}},
		Spec: corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "c",
			Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 80}}}}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIPs: []corev1.PodIP{{IP: ip}}},
	}
}

func (s *simulation) pick(options ...string) string { return options[s.rng.IntN(len(options))] }

func (s *simulation) compile() map[string]policy.NodeShare {
	nss := []*corev1.Namespace{
		{ObjectMeta: metav1.ObjectMeta{Name: "x", Labels: map[string]string{"kubernetes.io/metadata.name": "x"}}},
		{ObjectMeta: metav1.ObjectMeta{Name: "y", Labels: map[string]string{"kubernetes.io/metadata.name": "y"}}},
	}
	var pods []*corev1.Pod
	for _, p := range s.pods {
		pods = append(pods, p)
	}
	var nps []*networkingv1.NetworkPolicy
	for _, np := range s.policies {
		nps = append(nps, np)
	}
	shares := networkpolicy.Compile(nss, pods, nps)
	for _, n := range nodes {
		if _, ok := shares[n]; !ok {
			shares[n] = policy.NewNodeShare(n)
		}
		share := shares[n]
		share.ClusterRules = s.clusterRules(n)
		shares[n] = share
	}
	return shares
}

// simClusterPolicy is a ClusterNetworkPolicy of one rule: its subjects and peers are the
// pods labelled app=subject and app=peer ("" any pod; any address for the peer).
type simClusterPolicy struct {
	tier          policy.Tier
	priority      int32
	action        policy.ClusterAction
	dir           policy.Direction
	subject, peer string
	port          int32 // 0: every port
}

// writeCluster creates, changes or deletes a ClusterNetworkPolicy.
func (s *simulation) writeCluster() {
	name := fmt.Sprint("cnp-", s.rng.IntN(3))
	if _, ok := s.cluster[name]; ok && s.rng.IntN(3) == 0 {
		delete(s.cluster, name)
		return
	}
	s.cluster[name] = simClusterPolicy{
		tier:     []policy.Tier{policy.TierAdmin, policy.TierBaseline}[s.rng.IntN(2)],
		priority: int32(s.rng.IntN(2)),
		action:   []policy.ClusterAction{policy.ClusterAccept, policy.ClusterDeny, policy.ClusterPass}[s.rng.IntN(3)],
		dir:      []policy.Direction{policy.Ingress, policy.Egress}[s.rng.IntN(2)],
		subject:  s.pick("web", "db", ""),
		peer:     s.pick("web", "db", ""),
		port:     []int32{0, 80, 81}[s.rng.IntN(3)],
	}
}

// clusterRules are the node's cluster rules: a rule of each policy that selects one of
// its pods, in precedence order.
func (s *simulation) clusterRules(node string) []policy.ClusterRule {
	var out []policy.ClusterRule
	for _, name := range keysOf(setOf(s.cluster)) {
		c := s.cluster[name]
		r := policy.ClusterRule{ID: fmt.Sprintf("%s/%s/0", name, c.dir), Policy: name, Tier: c.tier, Priority: c.priority,
			Direction: c.dir, Action: c.action, AnyPeer: c.peer == ""}
		if c.port != 0 {
			r.Ports = []policy.Port{{Protocol: policy.TCP, Port: c.port}}
		}
		for _, p := range s.pods {
			if c.subject == "" || p.Labels["app"] == c.subject {
				if p.Spec.NodeName == node {
					r.Subjects = append(r.Subjects, keyOf(p))
				}
			}
			if !r.AnyPeer && p.Labels["app"] == c.peer {
				r.Peers = append(r.Peers, policy.HostPrefix(ipOf(p)))
			}
		}
		if len(r.Subjects) == 0 {
			continue
		}
		slices.SortFunc(r.Subjects, policy.PodKey.Compare)
		r.Peers = policy.SortPrefixes(r.Peers)
		out = append(out, r)
	}
	slices.SortFunc(out, policy.CompareClusterRules)
	return out
}

// write makes one random API write.
func (s *simulation) write() {
	if s.rng.IntN(4) == 0 {
		s.writeCluster()
		s.states = append(s.states, s.compile())
		return
	}
	switch s.rng.IntN(6) {
	case 0, 1, 2:
		np := s.policy()
		s.policies[np.Namespace+"/"+np.Name] = np
	case 3:
		if keys := keysOf(setOf(s.policies)); len(keys) > 0 {
			delete(s.policies, s.pick(keys...))
		}
	case 4:
		p := s.pods[s.pick(keysOf(setOf(s.pods))...)]
		q := p.DeepCopy()
		q.Labels = map[string]string{"app": s.pick("web", "db")}
		s.pods[p.Namespace+"/"+p.Name] = q
	default:
		// A pod deleted and another of the same name created, on another node, with a
		// new address (kovs quarantines freed addresses).
		k := s.pick(keysOf(setOf(s.pods))...)
		p := s.pods[k]
		delete(s.pods, k)
		s.gone.Add(keyOf(p), []netip.Addr{ipOf(p)})
		s.setPod(p.Namespace, p.Name, s.pick(nodes...), fmt.Sprintf("10.1.%d.%d", s.serial/250, s.serial%250))
	}
	s.states = append(s.states, s.compile())
}

func (s *simulation) policy() *networkingv1.NetworkPolicy {
	np := &networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: s.pick("x", "y"), Name: s.pick("p", "q")}}
	np.UID = types.UID(np.Namespace + "-" + np.Name)
	if s.rng.IntN(2) == 0 {
		np.Spec.PodSelector = metav1.LabelSelector{MatchLabels: map[string]string{"app": s.pick("web", "db")}}
	}
	switch s.rng.IntN(3) {
	case 0:
		np.Spec.PolicyTypes = []networkingv1.PolicyType{networkingv1.PolicyTypeIngress}
	case 1:
		np.Spec.PolicyTypes = []networkingv1.PolicyType{networkingv1.PolicyTypeEgress}
	default:
		np.Spec.PolicyTypes = []networkingv1.PolicyType{networkingv1.PolicyTypeIngress, networkingv1.PolicyTypeEgress}
	}
	for range s.rng.IntN(3) {
		np.Spec.Ingress = append(np.Spec.Ingress, networkingv1.NetworkPolicyIngressRule{From: s.peers(), Ports: s.ports()})
	}
	for range s.rng.IntN(3) {
		np.Spec.Egress = append(np.Spec.Egress, networkingv1.NetworkPolicyEgressRule{To: s.peers(), Ports: s.ports()})
	}
	return np
}

func (s *simulation) peers() []networkingv1.NetworkPolicyPeer {
	var out []networkingv1.NetworkPolicyPeer
	for range s.rng.IntN(3) {
		switch s.rng.IntN(4) {
		case 0:
			out = append(out, networkingv1.NetworkPolicyPeer{PodSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": s.pick("web", "db")}}})
		case 1:
			out = append(out, networkingv1.NetworkPolicyPeer{NamespaceSelector: &metav1.LabelSelector{
				MatchLabels: map[string]string{"kubernetes.io/metadata.name": s.pick("x", "y")}}})
		case 2:
			out = append(out, networkingv1.NetworkPolicyPeer{IPBlock: &networkingv1.IPBlock{CIDR: "10.0.0.0/16",
				Except: []string{fmt.Sprintf("10.0.%d.%d/32", s.rng.IntN(2), 1+s.rng.IntN(3))}}})
		default:
			out = append(out, networkingv1.NetworkPolicyPeer{IPBlock: &networkingv1.IPBlock{CIDR: fmt.Sprintf("10.0.%d.0/24", s.rng.IntN(2))}})
		}
	}
	return out
}

func (s *simulation) ports() []networkingv1.NetworkPolicyPort {
	tcp := corev1.ProtocolTCP
	switch s.rng.IntN(4) {
	case 0:
		return nil
	case 1:
		p := intstr.FromInt32(80)
		return []networkingv1.NetworkPolicyPort{{Protocol: &tcp, Port: &p}}
	case 2:
		p, end := intstr.FromInt32(80), int32(81)
		return []networkingv1.NetworkPolicyPort{{Protocol: &tcp, Port: &p, EndPort: &end}}
	default:
		p := intstr.FromString("http")
		return []networkingv1.NetworkPolicyPort{{Protocol: &tcp, Port: &p}}
	}
}

func setOf[V any](m map[string]V) map[string]struct{} {
	out := make(map[string]struct{}, len(m))
	for k := range m {
		out[k] = struct{}{}
	}
	return out
}

// step steps the gate, or, without it, sends every node its target at once.
func (s *simulation) step() {
	s.now = s.now.Add(time.Duration(s.rng.IntN(600)) * time.Millisecond)
	if s.withGate {
		s.core.advance(s.now)
		return
	}
	s.core.cut(s.now)
	s.core.releaseBefore(s.now, math.MaxUint64)
	for _, n := range s.core.nodes {
		n.restrictions = nil
		s.core.reindex(n)
	}
}

// advance steps the gate and delivers what it sends. What it sends allows only what the
// state of the cut before it or a later one allowed.
func (s *simulation) advance() {
	prev := s.src.taken
	s.step()
	for name, a := range s.agents {
		st := s.core.nodes[name]
		d, ok := a.r.delta(&st.sent, s.core.memo)
		if !ok {
			continue
		}
		if err := d.Apply(&a.received); err != nil {
			panic(fmt.Sprintf("node %s: the gate's delta does not apply: %v", name, err))
		}
		if err := a.received.Validate(); err != nil {
			panic(fmt.Sprintf("node %s: the gate sent an invalid share: %v", name, err))
		}
		if d.Release {
			a.floor = nil
		}
		a.enforce(prev)
	}
}

// run makes steps random events and returns the violations found and the checks made.
func (s *simulation) run(t *testing.T, writes int) (violations, checks int) {
	for w := 0; w < writes; {
		switch s.rng.IntN(12) {
		case 0, 1, 2, 3:
			s.write()
			w++
		case 4, 5, 6, 7:
			s.advance()
		case 8:
			if s.steady {
				s.advance()
				break
			}
			s.failover(s.core.gen + 1000)
		default:
			// An agent realizes some share it was sent, and reports it.
			a := s.agents[s.pick(nodes...)]
			if len(a.sent)-1 > a.realized {
				a.realized += 1 + s.rng.IntN(len(a.sent)-1-a.realized)
				name := a.sent[a.realized].share.Node
				s.core.realized(name, a.sent[a.realized].share.Generation)
				s.advance()
			}
		}
		v, n := s.check()
		violations += v
		checks += n
	}
	return violations, checks
}

type conn struct {
	src, dst *corev1.Pod
	port     int32
}

// check tests every connection against every combination of shares in force.
func (s *simulation) check() (violations, checks int) {
	for _, src := range s.pods {
		for _, dst := range s.pods {
			if src == dst {
				continue
			}
			for _, port := range []int32{80, 81} {
				c := conn{src, dst, port}
				oldest, allowed := s.possible(c)
				checks++
				if !allowed || s.allowedSince(c, oldest) {
					continue
				}
				violations++
				if s.first == "" {
					s.first = fmt.Sprintf("%s/%s -> %s/%s TCP %d after %d writes", src.Namespace, src.Name, dst.Namespace, dst.Name, port, len(s.states)-1)
				}
			}
		}
	}
	return violations, checks
}

// possible reports whether some combination of shares in force lets c through, and the
// oldest API state any of those shares came from.
func (s *simulation) possible(c conn) (oldest int, allowed bool) {
	srcKey, dstKey := keyOf(c.src), keyOf(c.dst)
	srcIP, dstIP := ipOf(c.src), ipOf(c.dst)
	a, b := s.agents[c.src.Spec.NodeName], s.agents[c.dst.Spec.NodeName]
	oldest = min(a.sent[a.realized].cut, b.sent[b.realized].cut)
	egress := func(sh policy.NodeShare) bool {
		return sh.HasPod(srcKey) && sh.Decide(policy.Egress, srcKey, dstIP, policy.TCP, c.port).Allowed
	}
	ingress := func(sh policy.NodeShare) bool {
		return sh.HasPod(dstKey) && sh.Decide(policy.Ingress, dstKey, srcIP, policy.TCP, c.port).Allowed
	}
	if a == b {
		for _, sh := range a.sent[a.realized:] {
			if egress(sh.share) && ingress(sh.share) {
				return oldest, true
			}
		}
		return oldest, false
	}
	var out, in bool
	for _, sh := range a.sent[a.realized:] {
		out = out || egress(sh.share)
	}
	for _, sh := range b.sent[b.realized:] {
		in = in || ingress(sh.share)
	}
	return oldest, out && in
}

// allowedSince reports whether some API state from index oldest on allowed c, with the
// pods as they are now (a pod of that name in that state with the same UID).
func (s *simulation) allowedSince(c conn, oldest int) bool {
	srcKey, dstKey := keyOf(c.src), keyOf(c.dst)
	for _, st := range s.states[oldest:] {
		out, in := st[c.src.Spec.NodeName], st[c.dst.Spec.NodeName]
		if out.HasPod(srcKey) && in.HasPod(dstKey) &&
			out.Decide(policy.Egress, srcKey, ipOf(c.dst), policy.TCP, c.port).Allowed &&
			in.Decide(policy.Ingress, dstKey, ipOf(c.src), policy.TCP, c.port).Allowed {
			return true
		}
	}
	return false
}

func keyOf(p *corev1.Pod) policy.PodKey {
	return policy.PodKey{Namespace: p.Namespace, Name: p.Name, UID: string(p.UID)}
}

func ipOf(p *corev1.Pod) netip.Addr { return netip.MustParseAddr(p.Status.PodIPs[0].IP) }

// fakeSource hands the gate cuts of the simulation's latest state.
type fakeSource struct {
	sim   *simulation
	last  map[string]policy.NodeShare
	taken int
}

func (f *fakeSource) Take(add, remove []string) networkpolicy.Cut {
	cur := f.sim.states[len(f.sim.states)-1]
	f.taken = len(f.sim.states) - 1
	cut := networkpolicy.Cut{Shares: map[string]policy.NodeShare{}, Deltas: map[string]policy.Delta{}, Gone: f.sim.gone}
	f.sim.gone = policy.Gone{}
	if f.last == nil {
		f.last = map[string]policy.NodeShare{}
	}
	for _, name := range remove {
		delete(f.last, name)
	}
	for name, old := range f.last {
		if d, ok := diffShares(old, cur[name]); ok {
			cut.Deltas[name] = d
			next := cur[name]
			next.Generation = d.Generation
			f.last[name] = next
		}
	}
	for _, name := range add {
		cut.Shares[name] = cur[name]
		f.last[name] = cur[name]
	}
	return cut
}

// diffShares is the delta from a to b, through a receiver that had a.
func diffShares(a, b policy.NodeShare) (policy.Delta, bool) {
	r := newReceiver(a.Generation)
	mark := func(kind policy.EntryKind, ids ...map[string]struct{}) {
		for _, set := range ids {
			for id := range set {
				k := policy.EntryKey{Kind: kind, ID: id}
				r.before[k] = a.Entry(k)
			}
		}
	}
	mark(policy.AddressSetEntry, setOf(a.AddressSets), setOf(b.AddressSets))
	mark(policy.AppliedToSetEntry, setOf(a.AppliedToSets), setOf(b.AppliedToSets))
	mark(policy.RuleEntry, setOf(a.Rules), setOf(b.Rules))
	iso, pods, cluster := a.Isolation, a.Pods, a.ClusterRules
	r.isolation, r.pods, r.cluster = &iso, &pods, &cluster
	b.Generation = a.Generation + 1
	d, _ := r.delta(&b, nil)
	empty := len(d.AddedAddressSets)+len(d.UpdatedAddressSets)+len(d.RemovedAddressSets)+len(d.AddedAppliedToSets)+
		len(d.UpdatedAppliedToSets)+len(d.RemovedAppliedToSets)+len(d.AddedRules)+len(d.UpdatedRules)+len(d.RemovedRules)+
		len(d.AddedPods)+len(d.RemovedPods) == 0 && d.Isolation == nil && d.ClusterRules == nil
	return d, !empty
}
