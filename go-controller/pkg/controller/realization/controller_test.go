package realization

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/record"

	"github.com/kovs-net/kovs/go-controller/pkg/controller/cachetrim"
	"github.com/kovs-net/kovs/go-controller/pkg/controller/networkpolicy"
	"github.com/kovs-net/kovs/go-controller/pkg/policy"
	"github.com/kovs-net/kovs/go-controller/pkg/policy/stream"
)

// fixture runs the real compiler and the realization controller on a fake cluster of
// three nodes: pods web-1 (node1) and web-2 (node2) labelled app=web, db-1 (node3).
type fixture struct {
	t        *testing.T
	client   *fake.Clientset
	ctl      *Controller
	recorder *record.FakeRecorder
}

func newFixture(t *testing.T, preexisting ...runtime.Object) *fixture {
	t.Helper()
	objs := []runtime.Object{namespace("x")}
	for i := 1; i <= 3; i++ {
		objs = append(objs, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("node%d", i)}})
	}
	objs = append(objs, pod("web-1", "node1", "app=web"), pod("web-2", "node2", "app=web"), pod("db-1", "node3", "app=db"))
	objs = append(objs, preexisting...)
	grace := time.Nanosecond
	if len(preexisting) > 0 {
		grace = time.Minute // a restarted controller
	}
	f := &fixture{t: t, client: fake.NewClientset(objs...), recorder: record.NewFakeRecorder(100)}
	factory := cachetrim.NewSharedInformerFactory(f.client, 0)
	comp, err := networkpolicy.New(factory, networkpolicy.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if f.ctl, err = New(factory, f.client, f.recorder, Options{MinWriteInterval: 10 * time.Millisecond, StartupGrace: grace}); err != nil {
		t.Fatal(err)
	}
	nodes := factory.Core().V1().Nodes().Informer()
	ctx, cancel := context.WithCancel(context.Background())
	factory.Start(ctx.Done())
	done := make(chan struct{}, 2)
	go func() { _ = comp.Run(ctx); done <- struct{}{} }()
	go func() { _ = f.ctl.Run(ctx, stream.Rebase(comp, 1000), nodes); done <- struct{}{} }()
	t.Cleanup(func() { cancel(); <-done; <-done; factory.Shutdown() })
	return f
}

// status waits until the policy's annotation satisfies ok and returns it.
func (f *fixture) status(name string, what string, ok func(Status) bool) Status {
	f.t.Helper()
	var st Status
	deadline := time.Now().Add(10 * time.Second)
	for {
		np, err := f.client.NetworkingV1().NetworkPolicies("x").Get(context.Background(), name, metav1.GetOptions{})
		if err == nil {
			if st, err = ParseStatus(np.Annotations[AnnotationKey]); err == nil && ok(st) {
				return st
			}
		}
		if time.Now().After(deadline) {
			f.t.Fatalf("policy %s: waiting for %s, annotation %q (%v)", name, what, st, err)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// compiled waits until the policy concerns n nodes and is compiled for all of them.
func (f *fixture) compiled(name string, n int) Status {
	f.t.Helper()
	return f.status(name, fmt.Sprintf("%d concerned nodes, compiled", n), func(s Status) bool {
		return s.Concerned == n && s.Generation > 0 && f.ctl.pending(name) == 0
	})
}

func (f *fixture) apply(np *networkingv1.NetworkPolicy) {
	f.t.Helper()
	ctx := context.Background()
	old, err := f.client.NetworkingV1().NetworkPolicies(np.Namespace).Get(ctx, np.Name, metav1.GetOptions{})
	if err == nil {
		np.Annotations, np.ResourceVersion = old.Annotations, old.ResourceVersion
		_, err = f.client.NetworkingV1().NetworkPolicies(np.Namespace).Update(ctx, np, metav1.UpdateOptions{})
	} else {
		_, err = f.client.NetworkingV1().NetworkPolicies(np.Namespace).Create(ctx, np, metav1.CreateOptions{})
	}
	if err != nil {
		f.t.Fatal(err)
	}
}

func (f *fixture) realized(node string, gen uint64) { f.ctl.Reports().Realized(node, gen) }

func (f *fixture) events() []string {
	var out []string
	for {
		select {
		case e := <-f.recorder.Events:
			out = append(out, e)
		default:
			return out
		}
	}
}

func TestPolicyIsRealizedWhenEveryConcernedNodeReports(t *testing.T) {
	f := newFixture(t)
	f.apply(policyObj("web", "app=web", allowFrom("app=db", 80)))
	st := f.compiled("web", 2)
	if st.Realized != 0 || st.Generation < 1000 {
		t.Fatalf("before any report: %s, want 0/2 at a rebased generation", st)
	}
	f.realized("node3", st.Generation) // node3 has no web pod: it does not count
	f.realized("node1", st.Generation)
	f.status("web", "1/2", func(s Status) bool { return s.Realized == 1 })
	if ev := f.events(); len(ev) != 0 {
		t.Errorf("events before completion: %q", ev)
	}
	f.realized("node2", st.Generation-1) // not new enough
	time.Sleep(30 * time.Millisecond)
	f.realized("node2", st.Generation)
	f.status("web", "2/2", func(s Status) bool { return s.Complete() && s.Concerned == 2 })
	var ev []string
	eventually(t, "the "+ReasonRealized+" event", func() error {
		if ev = append(ev, f.events()...); len(ev) == 0 {
			return fmt.Errorf("no event")
		}
		return nil
	})
	time.Sleep(20 * time.Millisecond)
	if ev = append(ev, f.events()...); len(ev) != 1 || !strings.Contains(ev[0], ReasonRealized) || !strings.Contains(ev[0], "2/2 nodes") {
		t.Errorf("events %q, want one %s", ev, ReasonRealized)
	}
	if sum := f.ctl.Summary(); sum.Complete != 1 || sum.Policies["x/web"].Concerned != 2 {
		t.Errorf("summary %+v", sum)
	}
}

func TestUpdatedPolicyNeedsTheNewGeneration(t *testing.T) {
	f := newFixture(t)
	f.apply(policyObj("web", "app=web", allowFrom("app=db", 80)))
	st := f.compiled("web", 2)
	f.realized("node1", st.Generation)
	f.realized("node2", st.Generation)
	f.status("web", "2/2", Status.Complete)
	f.apply(policyObj("web", "app=web", allowFrom("app=db", 443)))
	nu := f.status("web", "a newer generation, realized nowhere", func(s Status) bool { return s.Generation > st.Generation && s.Realized == 0 })
	f.realized("node1", nu.Generation)
	f.realized("node2", nu.Generation)
	f.status("web", "2/2 at the new generation", func(s Status) bool { return s.Complete() && s.Generation == nu.Generation })
}

// A policy without rules (default deny) has nothing in the shares but the isolation of
// its pods: it is realized once the nodes realized that.
func TestDenyAllPolicyIsRealized(t *testing.T) {
	f := newFixture(t)
	f.apply(policyObj("deny", ""))
	st := f.compiled("deny", 3)
	for _, n := range []string{"node1", "node2", "node3"} {
		f.realized(n, st.Generation)
	}
	f.status("deny", "3/3", Status.Complete)
}

// A policy over pods another policy already isolates is realized only once its own rules
// are in the shares, not before the compiler got to it.
func TestPolicyIsNotRealizedBeforeItsRulesArrive(t *testing.T) {
	f := newFixture(t)
	f.apply(policyObj("deny", "app=web"))
	st := f.compiled("deny", 2)
	f.realized("node1", st.Generation)
	f.realized("node2", st.Generation)
	f.status("deny", "2/2", Status.Complete)
	np := policyObj("web", "app=web", allowFrom("app=db", 80))
	np.UID = types.UID("uid-web")
	// The verdict before the compiler ran: the pods are isolated, the rule is missing.
	exp, err := expectations(np, f.ctl.podIndex)
	if err != nil || len(exp) != 2 {
		t.Fatalf("expectations: %v, %v", exp, err)
	}
	if done, _ := f.ctl.tracker.verdict("node1", *exp["node1"]); done {
		t.Error("a policy whose rule is not in the share counts as realized")
	}
	f.apply(np)
	nu := f.status("web", "2 concerned nodes", func(s Status) bool { return s.Concerned == 2 && s.Generation > st.Generation })
	if nu.Realized != 0 {
		t.Errorf("web before reports: %s", nu)
	}
}

// A new pod the policy selects makes its node concerned, and needs the generation that
// isolates it.
func TestNewPodMakesItsNodeConcerned(t *testing.T) {
	f := newFixture(t)
	f.apply(policyObj("web", "app=web", allowFrom("app=db", 80)))
	st := f.compiled("web", 2)
	for _, n := range []string{"node1", "node2", "node3"} {
		f.realized(n, st.Generation)
	}
	f.status("web", "2/2", Status.Complete)
	if _, err := f.client.CoreV1().Pods("x").Create(context.Background(), pod("web-3", "node3", "app=web"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	nu := f.status("web", "3 concerned nodes", func(s Status) bool { return s.Concerned == 3 && s.Generation > st.Generation })
	if nu.Realized != 2 {
		t.Errorf("after web-3 arrived on node3: %s, want 2/3", nu)
	}
	f.realized("node3", nu.Generation)
	f.status("web", "3/3", Status.Complete)
}

// A restarted controller does not show the policies it finds realized as lost while the
// agents reconnect, nor announce them again.
func TestRestartedControllerKeepsCompleteStatuses(t *testing.T) {
	np := policyObj("web", "app=web", allowFrom("app=db", 80))
	np.Annotations = map[string]string{AnnotationKey: "2/2 nodes, generation 5"}
	f := newFixture(t, np)
	eventually(t, "the new status computed", func() error {
		if st := f.ctl.Summary().Policies["x/web"]; st.Generation == 0 || f.ctl.pending("web") > 0 {
			return fmt.Errorf("status %s", st)
		}
		return nil
	})
	gen := f.ctl.Summary().Policies["x/web"].Generation
	if st := f.status("web", "any", func(Status) bool { return true }); st.String() != "2/2 nodes, generation 5" {
		t.Errorf("during the startup grace the annotation became %q", st)
	}
	f.realized("node1", gen)
	f.realized("node2", gen)
	f.status("web", "2/2 at the new generation", func(s Status) bool { return s.Complete() && s.Generation == gen })
	if ev := f.events(); len(ev) != 0 {
		t.Errorf("events %q after a restart, want none", ev)
	}
}

func TestStatusRoundTrip(t *testing.T) {
	st := Status{Realized: 2, Concerned: 3, Generation: 1764489612345678}
	if st.String() != "2/3 nodes, generation 1764489612345678" {
		t.Errorf("String() = %q", st)
	}
	back, err := ParseStatus(st.String())
	if err != nil || back != st {
		t.Errorf("ParseStatus(%q) = %+v, %v", st, back, err)
	}
}

func eventually(t *testing.T, what string, check func() error) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		err := check()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s: %v", what, err)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func namespace(name string) *corev1.Namespace {
	return &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"ns": name}}}
}

func pod(name, node, label string) *corev1.Pod {
	k, v, _ := strings.Cut(label, "=")
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "x", Name: name, UID: types.UID("uid-" + name), Labels: map[string]string{k: v}},
		Spec: corev1.PodSpec{NodeName: node}, Status: corev1.PodStatus{Phase: corev1.PodRunning}}
}

// policyObj selects the pods with label (all pods when empty) for ingress, with rules.
func policyObj(name, label string, rules ...networkingv1.NetworkPolicyIngressRule) *networkingv1.NetworkPolicy {
	np := &networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: "x", Name: name, UID: types.UID("uid-" + name)},
		Spec: networkingv1.NetworkPolicySpec{PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress}, Ingress: rules}}
	if label != "" {
		k, v, _ := strings.Cut(label, "=")
		np.Spec.PodSelector.MatchLabels = map[string]string{k: v}
	}
	return np
}

func allowFrom(label string, port int) networkingv1.NetworkPolicyIngressRule {
	k, v, _ := strings.Cut(label, "=")
	p := intstr.FromInt32(int32(port))
	return networkingv1.NetworkPolicyIngressRule{
		From:  []networkingv1.NetworkPolicyPeer{{PodSelector: &metav1.LabelSelector{MatchLabels: map[string]string{k: v}}}},
		Ports: []networkingv1.NetworkPolicyPort{{Port: &p}},
	}
}

// pending counts the nodes whose share does not reflect the policy yet.
func (c *Controller) pending(name string) int {
	c.tracker.mu.Lock()
	defer c.tracker.mu.Unlock()
	n := 0
	for _, r := range c.tracker.nodes {
		if r.waiting[types.NamespacedName{Namespace: "x", Name: name}] == maxGeneration {
			n++
		}
	}
	return n
}

// A policy written before its pods are known (or before they exist) first concerns no
// node; once it is enforced on the nodes of its pods, that is announced like a new
// policy's realization (seen missing in an e2e run: "0/0" was the first status written,
// and the later "2/2" counted as nothing new).
func TestPolicyRealizedAfterConcerningNoNodeIsAnnounced(t *testing.T) {
	f := newFixture(t)
	f.apply(policyObj("late", "app=late", allowFrom("app=db", 80)))
	f.status("late", "0/0", func(s Status) bool { return s.Concerned == 0 && s.Complete() })
	// node1's agent is ahead of what the controller is about to send (as stand-ins that
	// realize at once are): the status goes from 0/0 to 1/1 with no incomplete one between.
	f.realized("node1", 1<<62)
	if _, err := f.client.CoreV1().Pods("x").Create(context.Background(), pod("late-1", "node1", "app=late"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	f.status("late", "1/1", func(s Status) bool { return s.Concerned == 1 && s.Complete() })
	eventually(t, "the "+ReasonRealized+" event", func() error {
		for _, e := range f.events() {
			if strings.Contains(e, ReasonRealized) && strings.Contains(e, "1/1 nodes") {
				return nil
			}
		}
		return fmt.Errorf("no %s event for 1/1 nodes", ReasonRealized)
	})
}

// TestStatusAfterReportsIsTheWholeStatus: a policy over 50 nodes; after each node's
// report its status, which asks about the reporting node only, equals one computed over
// every node afresh; a share change on a node that had realized it (its rule changed,
// then its pod no longer isolated) is seen at once, and so is a pod leaving a node, and
// the policy's update.
func TestStatusAfterReportsIsTheWholeStatus(t *testing.T) {
	const n = 50
	x := newWideStatus(t, n)
	defer x.stop()
	whole := func() Status {
		t.Helper()
		v := &statusView{}
		st, err := x.c.wholeStatus(x.np, v)
		if err != nil {
			t.Fatal(err)
		}
		return st
	}
	check := func(what string, want Status) {
		t.Helper()
		st, err := x.c.status(x.np)
		if err != nil {
			t.Fatal(err)
		}
		if st != want || st != whole() {
			t.Fatalf("%s: status %s, computed whole %s, want %s", what, st, whole(), want)
		}
	}
	check("no report", Status{Concerned: n, Generation: 10})
	for i, node := range x.nodes {
		x.c.tracker.Realized(node, 10)
		check(fmt.Sprintf("%d reports", i+1), Status{Realized: i + 1, Concerned: n, Generation: 10})
	}
	// The policy's rule changes on node-0 at generation 11 (the pods stay as they are).
	rule := wideRule
	rule.Ports = []policy.Port{{Protocol: policy.TCP, Port: 81}}
	if err := x.c.tracker.delta("node-0", policy.Delta{Node: "node-0", FromGeneration: 10, Generation: 11, UpdatedRules: []policy.Rule{rule}}); err != nil {
		t.Fatal(err)
	}
	check("its rule changed on node-0", Status{Realized: n - 1, Concerned: n, Generation: 11})
	// node-0's share no longer reflects the policy: a snapshot at generation 12 without
	// the pod isolated.
	s := policy.NewNodeShare("node-0")
	s.Generation = 12
	if err := x.c.tracker.snapshot("node-0", s); err != nil {
		t.Fatal(err)
	}
	check("node-0 no longer reflecting it", Status{Realized: n - 1, Concerned: n, Generation: 10})
	// w-1 finishes: node-1 is no longer concerned (the pod handler makes the view stale).
	old, _ := x.c.pods.Pods("x").Get("w-1")
	done := old.DeepCopy()
	done.Status.Phase = corev1.PodSucceeded
	if err := x.c.podIndex.Update(done); err != nil {
		t.Fatal(err)
	}
	x.c.podChanged(old, done)
	check("w-1 finished", Status{Realized: n - 2, Concerned: n - 1, Generation: 10})
	// The policy isolates egress too, which no share reflects: a new version of it.
	np := x.np.DeepCopy()
	np.ResourceVersion = "2"
	np.Spec.PolicyTypes = append(np.Spec.PolicyTypes, networkingv1.PolicyTypeEgress)
	x.np = np
	check("the policy isolating egress", Status{Realized: 0, Concerned: n - 1, Generation: 0})
}
