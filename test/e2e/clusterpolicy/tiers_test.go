package clusterpolicy_test

import (
	"context"
	"fmt"
	"net/netip"
	"path"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/network-policy-api/apis/v1beta1"
	"sigs.k8s.io/network-policy-api/pkg/client/clientset/versioned"

	"github.com/kovs-net/kovs/go-controller/pkg/controller/realization"
	"github.com/kovs-net/kovs/go-controller/pkg/pipeline"
	"github.com/kovs-net/kovs/test/e2e/clusterpolicy/tiermodel"
	"github.com/kovs-net/kovs/test/e2e/framework"
	"github.com/kovs-net/kovs/test/e2e/netpol/policymodel"
)

// The tier truth table: Admin, NetworkPolicy and Baseline mixed, in three steps over five
// pods on two nodes, probed on TCP 80 and 81 between every two pods. Every expectation is
// written by hand and checked offline against the independent model (tiermodel,
// TestTierCasesAgreeWithModel); the sandboxes (IPv4, IPv6, and dual-stack probed over
// both families) must then give exactly the expectations, each denial shown by the drop
// counters of the table of the tier and direction that decides it.
var tierPods = []struct{ ns, name, node string }{
	{"x", "a", "node1"}, {"x", "b", "node2"}, {"y", "a", "node1"}, {"y", "b", "node2"}, {"z", "a", "node2"},
}

var tierPorts = []string{"80/tcp", "81/tcp"}

// tierCell sets the expectation of the pairs it matches (later cells win): From and To are
// "ns/pod" or "ns/*"; Ports limits it (all when empty); Verdict is "allow" or the tier and
// direction that deny, as tiermodel.Verdict prints them ("deny (Admin ingress)").
type tierCell struct {
	From, To string
	Ports    []string
	Verdict  string
}

type tierStep struct {
	What string
	// The ClusterNetworkPolicies and NetworkPolicies after the step: created, or updated
	// when an earlier step made them. No step deletes one.
	Cluster []*v1beta1.ClusterNetworkPolicy
	Netpols []*networkingv1.NetworkPolicy
	Expect  []tierCell
}

func nsSel(name string) *metav1.LabelSelector {
	return &metav1.LabelSelector{MatchLabels: map[string]string{"kubernetes.io/metadata.name": name}}
}

func podsIn(ns, pod string) *v1beta1.NamespacedPod {
	return &v1beta1.NamespacedPod{NamespaceSelector: *nsSel(ns), PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{"pod": pod}}}
}

func tcpPort(n int32) []v1beta1.ClusterNetworkPolicyProtocol {
	return []v1beta1.ClusterNetworkPolicyProtocol{{TCP: &v1beta1.ClusterNetworkPolicyProtocolTCP{DestinationPort: &v1beta1.Port{Number: n}}}}
}

func cnp(name string, tier v1beta1.Tier, prio int32, subject v1beta1.ClusterNetworkPolicySubject,
	in []v1beta1.ClusterNetworkPolicyIngressRule, out []v1beta1.ClusterNetworkPolicyEgressRule) *v1beta1.ClusterNetworkPolicy {
	return &v1beta1.ClusterNetworkPolicy{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: v1beta1.ClusterNetworkPolicySpec{
		Tier: tier, Priority: prio, Subject: subject, Ingress: in, Egress: out}}
}

const (
	accept = v1beta1.ClusterNetworkPolicyRuleActionAccept
	deny   = v1beta1.ClusterNetworkPolicyRuleActionDeny
	pass   = v1beta1.ClusterNetworkPolicyRuleActionPass
)

func tierSteps() []tierStep {
	port80 := intstr.FromInt32(80)
	tcp := corev1.ProtocolTCP
	// x accepts y on TCP 80 (and so is isolated for ingress).
	xAllowsY80 := &networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: "x", Name: "allow-y-80"},
		Spec: networkingv1.NetworkPolicySpec{PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress},
			Ingress: []networkingv1.NetworkPolicyIngressRule{{
				From:  []networkingv1.NetworkPolicyPeer{{NamespaceSelector: nsSel("y")}},
				Ports: []networkingv1.NetworkPolicyPort{{Protocol: &tcp, Port: &port80}}}}}}
	all := v1beta1.ClusterNetworkPolicySubject{Namespaces: &metav1.LabelSelector{}}
	nsX := v1beta1.ClusterNetworkPolicySubject{Namespaces: nsSel("x")}
	nsY := v1beta1.ClusterNetworkPolicySubject{Namespaces: nsSel("y")}
	// Baseline: nobody accepts z, where no NetworkPolicy decides.
	baselineNoZ := cnp("baseline-no-z", v1beta1.BaselineTier, 10, all,
		[]v1beta1.ClusterNetworkPolicyIngressRule{{Name: "deny-z", Action: deny, From: []v1beta1.ClusterNetworkPolicyIngressPeer{{Namespaces: nsSel("z")}}}}, nil)
	// Admin over x: y/b denied, z accepted on 81, whatever the NetworkPolicy says.
	adminX := cnp("admin-x", v1beta1.AdminTier, 20, nsX, []v1beta1.ClusterNetworkPolicyIngressRule{
		{Name: "deny-y-b", Action: deny, From: []v1beta1.ClusterNetworkPolicyIngressPeer{{Pods: podsIn("y", "b")}}},
		{Name: "accept-z-81", Action: accept, From: []v1beta1.ClusterNetworkPolicyIngressPeer{{Namespaces: nsSel("z")}}, Protocols: tcpPort(81)},
	}, nil)
	// Step 3: admin-x passes y to the NetworkPolicy first (past its own deny-y-b), an
	// Admin of higher precedence (lower priority) accepts y/b on 81 before that Pass, and
	// y's egress to z: 80 passed (to Baseline, which denies it), the rest denied by Admin.
	adminXPass := adminX.DeepCopy()
	adminXPass.Spec.Ingress = append([]v1beta1.ClusterNetworkPolicyIngressRule{
		{Name: "pass-y", Action: pass, From: []v1beta1.ClusterNetworkPolicyIngressPeer{{Namespaces: nsSel("y")}}}}, adminXPass.Spec.Ingress...)
	adminYB81 := cnp("admin-y-b-81", v1beta1.AdminTier, 5, nsX, []v1beta1.ClusterNetworkPolicyIngressRule{
		{Name: "accept-y-b-81", Action: accept, From: []v1beta1.ClusterNetworkPolicyIngressPeer{{Pods: podsIn("y", "b")}}, Protocols: tcpPort(81)},
	}, nil)
	adminYEgress := cnp("admin-y-egress", v1beta1.AdminTier, 10, nsY, nil, []v1beta1.ClusterNetworkPolicyEgressRule{
		{Name: "pass-z-80", Action: pass, To: []v1beta1.ClusterNetworkPolicyEgressPeer{{Namespaces: nsSel("z")}}, Protocols: tcpPort(80)},
		{Name: "deny-z", Action: deny, To: []v1beta1.ClusterNetworkPolicyEgressPeer{{Namespaces: nsSel("z")}}},
	})
	baselineYEgress := cnp("baseline-y-egress", v1beta1.BaselineTier, 20, nsY, nil, []v1beta1.ClusterNetworkPolicyEgressRule{
		{Name: "deny-z-80", Action: deny, To: []v1beta1.ClusterNetworkPolicyEgressPeer{{Namespaces: nsSel("z")}}, Protocols: tcpPort(80)},
	})

	step1 := []tierCell{
		{From: "*", To: "x/*", Verdict: "deny (NetworkPolicy ingress)"},
		{From: "y/*", To: "x/*", Ports: []string{"80/tcp"}, Verdict: "allow"},
		{From: "z/*", To: "y/*", Verdict: "deny (Baseline ingress)"},
	}
	step2 := append(slices.Clone(step1),
		tierCell{From: "y/b", To: "x/*", Verdict: "deny (Admin ingress)"},
		tierCell{From: "z/a", To: "x/*", Ports: []string{"81/tcp"}, Verdict: "allow"},
	)
	step3 := append(slices.Clone(step1),
		tierCell{From: "z/a", To: "x/*", Ports: []string{"81/tcp"}, Verdict: "allow"},
		tierCell{From: "y/b", To: "x/*", Ports: []string{"81/tcp"}, Verdict: "allow"},
		tierCell{From: "y/*", To: "z/*", Ports: []string{"80/tcp"}, Verdict: "deny (Baseline egress)"},
		tierCell{From: "y/*", To: "z/*", Ports: []string{"81/tcp"}, Verdict: "deny (Admin egress)"},
	)
	return []tierStep{
		{What: "NetworkPolicy isolates x; Baseline denies z where none decides", Cluster: []*v1beta1.ClusterNetworkPolicy{baselineNoZ},
			Netpols: []*networkingv1.NetworkPolicy{xAllowsY80}, Expect: step1},
		{What: "an Admin Deny and Accept over the NetworkPolicy", Cluster: []*v1beta1.ClusterNetworkPolicy{baselineNoZ, adminX},
			Netpols: []*networkingv1.NetworkPolicy{xAllowsY80}, Expect: step2},
		{What: "Pass in both directions, Admin priorities, Baseline egress", Cluster: []*v1beta1.ClusterNetworkPolicy{baselineNoZ, adminXPass, adminYB81, adminYEgress, baselineYEgress},
			Netpols: []*networkingv1.NetworkPolicy{xAllowsY80}, Expect: step3},
	}
}

// tierExpect is the hand-written verdict of one probe.
func tierExpect(cells []tierCell, from, to, port string) string {
	v := "allow"
	for _, c := range cells {
		if cellMatches(c.From, from) && cellMatches(c.To, to) && (len(c.Ports) == 0 || slices.Contains(c.Ports, port)) {
			v = c.Verdict
		}
	}
	return v
}

func cellMatches(pattern, pod string) bool {
	if pattern == "*" {
		return true
	}
	ok, _ := path.Match(pattern, pod)
	return ok
}

// tierModel is the model's cluster after a step, with the pods' addresses of the sandbox
// (or made up, offline: the model needs one per family it is asked about).
func tierModel(st tierStep, pods []corev1.Pod) *tiermodel.Cluster {
	m := &tiermodel.Cluster{Pods: pods}
	for _, ns := range []string{"x", "y", "z"} {
		m.Namespaces = append(m.Namespaces, corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})
	}
	for _, p := range st.Cluster {
		m.ClusterPolicies = append(m.ClusterPolicies, *p)
	}
	for _, np := range st.Netpols {
		m.NetworkPolicies = append(m.NetworkPolicies, *np)
	}
	return m
}

func offlinePods() []corev1.Pod {
	var pods []corev1.Pod
	for i, p := range tierPods {
		pods = append(pods, corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: p.ns, Name: p.name, Labels: map[string]string{"pod": p.name}},
			Spec:       corev1.PodSpec{NodeName: p.node},
			Status:     corev1.PodStatus{PodIPs: []corev1.PodIP{{IP: fmt.Sprintf("10.244.0.%d", i+2)}, {IP: fmt.Sprintf("fd00:10:244::%d", i+2)}}},
		})
	}
	return pods
}

func parsePort(p string) (int32, corev1.Protocol) {
	var n int32
	var proto string
	fmt.Sscanf(strings.Replace(p, "/", " ", 1), "%d %s", &n, &proto)
	return n, corev1.Protocol(strings.ToUpper(proto))
}

// TestTierCasesAgreeWithModel checks every hand-written expectation of the tier truth
// table against the independent model, over IPv4 and IPv6. Offline: no sandbox.
func TestTierCasesAgreeWithModel(t *testing.T) {
	pods := offlinePods()
	for i, st := range tierSteps() {
		m := tierModel(st, pods)
		for _, from := range tierPods {
			for _, to := range tierPods {
				if from == to {
					continue
				}
				f, d := from.ns+"/"+from.name, to.ns+"/"+to.name
				for _, port := range tierPorts {
					n, proto := parsePort(port)
					for _, v6 := range []bool{false, true} {
						conn := policymodel.Connection{From: f, To: d, Protocol: proto, Port: n, IPv6: v6}
						got, err := m.Decide(conn)
						if err != nil {
							t.Errorf("step %d: %v", i+1, err)
							continue
						}
						if want := tierExpect(st.Expect, f, d, port); got.String() != want {
							t.Errorf("step %d (%s): %s: the case says %s, the model %s", i+1, st.What, conn, want, got)
						}
					}
				}
			}
		}
	}
}

// TestTierTruthTables probes the tier truth table in three sandboxes of two nodes: IPv4,
// IPv6, and dual-stack (every pair over both families), side by side.
func TestTierTruthTables(t *testing.T) {
	env := framework.Require(t)
	for _, family := range []string{"ipv4", "ipv6", "dual"} {
		t.Run(family, func(t *testing.T) {
			t.Parallel()
			s := framework.Up(t, env, "--nodes", "2", "--ip-family", family)
			cfg, err := clientcmd.BuildConfigFromFlags("", s.Layout.Kubeconfig())
			if err != nil {
				t.Fatal(err)
			}
			client, err := versioned.NewForConfig(cfg)
			if err != nil {
				t.Fatal(err)
			}
			runTierTable(t, s, client)
		})
	}
}

func runTierTable(t *testing.T, s *framework.Sandbox, client versioned.Interface) {
	ctx := context.Background()
	for _, ns := range []string{"x", "y", "z"} {
		s.EnsureNamespace(t, ns, nil)
	}
	for _, p := range tierPods {
		s.CreatePod(t, framework.PodSpec{Namespace: p.ns, Name: p.name, Node: p.node, Labels: map[string]string{"pod": p.name}})
	}
	running := map[string]*corev1.Pod{}
	var pods []corev1.Pod
	for _, p := range tierPods {
		pod := s.WaitRunning(t, p.ns, p.name, 90*time.Second)
		running[p.ns+"/"+p.name] = pod
		pods = append(pods, *pod)
	}
	var families []bool // IPv6 or not, for each address family the pods have
	for _, a := range framework.PodIPs(running["x/a"]) {
		families = append(families, a.Is6())
	}
	for i, st := range tierSteps() {
		what := fmt.Sprintf("step %d (%s)", i+1, st.What)
		applyTierStep(t, ctx, s, client, st, what)
		m := tierModel(st, pods)
		var failures []string
		probes, denied := 0, 0
		for _, from := range tierPods {
			for _, to := range tierPods {
				if from == to {
					continue
				}
				f, d := from.ns+"/"+from.name, to.ns+"/"+to.name
				for _, port := range tierPorts {
					n, proto := parsePort(port)
					for _, v6 := range families {
						conn := policymodel.Connection{From: f, To: d, Protocol: proto, Port: n, IPv6: v6}
						want, err := m.Decide(conn)
						if err != nil {
							t.Fatalf("%s: the model: %v", what, err)
						}
						probes++
						if !want.Allowed {
							denied++
						}
						if err := probeTier(t, s, running[f], running[d], from.node, to.node, port, v6, want); err != nil {
							failures = append(failures, fmt.Sprintf("%s: want %s: %v", conn, want, err))
						}
					}
				}
			}
		}
		t.Logf("%s: %d probes, %d denied, %d not as expected", what, probes, denied, len(failures))
		for _, f := range failures {
			t.Errorf("%s: %s", what, f)
		}
	}
}

// applyTierStep creates or updates the step's objects and waits until kovs reports them
// realized: every ClusterNetworkPolicy Programmed at its generation, every NetworkPolicy's
// realization annotation complete.
func applyTierStep(t *testing.T, ctx context.Context, s *framework.Sandbox, client versioned.Interface, st tierStep, what string) {
	t.Helper()
	cnps := client.PolicyV1beta1().ClusterNetworkPolicies()
	for _, p := range st.Cluster {
		cur, err := cnps.Get(ctx, p.Name, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			_, err = cnps.Create(ctx, p.DeepCopy(), metav1.CreateOptions{})
		case err == nil:
			cur.Spec = p.Spec
			_, err = cnps.Update(ctx, cur, metav1.UpdateOptions{})
		}
		if err != nil {
			t.Fatalf("%s: %s: %v", what, p.Name, err)
		}
	}
	for _, np := range st.Netpols {
		_, err := s.Client.NetworkingV1().NetworkPolicies(np.Namespace).Create(ctx, np.DeepCopy(), metav1.CreateOptions{})
		if err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatalf("%s: %s/%s: %v", what, np.Namespace, np.Name, err)
		}
	}
	wctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	for _, p := range st.Cluster {
		programmed(t, wctx, client, p.Name, "")
	}
	for _, np := range st.Netpols {
		var last string
		err := wait.PollUntilContextCancel(wctx, 50*time.Millisecond, true, func(ctx context.Context) (bool, error) {
			got, err := s.Client.NetworkingV1().NetworkPolicies(np.Namespace).Get(ctx, np.Name, metav1.GetOptions{})
			if err != nil {
				return false, err
			}
			last = got.Annotations[realization.AnnotationKey]
			st, err := realization.ParseStatus(last)
			return err == nil && st.Complete() && st.Concerned > 0, nil
		})
		if err != nil {
			t.Fatalf("%s: %s/%s not realized (%s=%q): %v", what, np.Namespace, np.Name, realization.AnnotationKey, last, err)
		}
	}
}

// tierTables are the tables whose drop flows count the denials of each tier and
// direction, on the source's node (egress) or the destination's (ingress).
var tierTables = map[string]pipeline.Table{
	"Admin egress": pipeline.AdminEgressPolicy, "Admin ingress": pipeline.AdminIngressPolicy,
	"NetworkPolicy egress": pipeline.EgressPolicy, "NetworkPolicy ingress": pipeline.IngressPolicy,
	"Baseline egress": pipeline.BaselineEgressPolicy, "Baseline ingress": pipeline.BaselineIngressPolicy,
}

// probeTier probes from -> to on port over the family and compares with want. An allowed
// connection must reach the destination's responder; a denied one must get no answer, and
// the drop flows of the table of want's tier and direction, on the node that decides,
// must count it within framework.EvidenceWait (silence alone is no proof).
func probeTier(t *testing.T, s *framework.Sandbox, from, to *corev1.Pod, fromNode, toNode, port string, v6 bool, want tiermodel.Verdict) error {
	addr, ok := podAddr(to, v6)
	if !ok {
		return fmt.Errorf("%s/%s has no address of the family", to.Namespace, to.Name)
	}
	if want.Allowed {
		r := s.Probe(from, addr, port, 3*time.Second)
		if !r.Connected || r.Reply == nil || r.Reply.Identity != to.Namespace+"/"+to.Name {
			return fmt.Errorf("%s", framework.Describe(r))
		}
		return nil
	}
	key := string(want.Tier) + " " + want.Direction
	table, ok := tierTables[key]
	if !ok {
		return fmt.Errorf("no table for %q", key)
	}
	node := fromNode
	if want.Direction == "ingress" {
		node = toNode
	}
	drops := func() (uint64, error) {
		flows, err := s.ListFlows(node)
		if err != nil {
			return 0, err
		}
		var n uint64
		for _, f := range flows {
			if f.Table == int(table.ID) && strings.HasSuffix(f.Text, "actions=drop") {
				n += f.Packets
			}
		}
		return n, nil
	}
	before, err := drops()
	if err != nil {
		return err
	}
	// Short: a connection that the switch let through answers in far less, and even one
	// that answered later would not count on the drop flows below.
	r := s.Probe(from, addr, port, 500*time.Millisecond)
	if !r.TimedOut {
		return fmt.Errorf("not dropped: %s", framework.Describe(r))
	}
	after := before
	err = wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, framework.EvidenceWait, true, func(context.Context) (bool, error) {
		n, err := drops()
		after = n
		return err == nil && n > before, err
	})
	if err != nil {
		return fmt.Errorf("no answer, but %s's drop flows on %s counted nothing (%d packets before and after): no evidence", table.Name, node, after)
	}
	return nil
}

func podAddr(p *corev1.Pod, v6 bool) (netip.Addr, bool) {
	for _, a := range framework.PodIPs(p) {
		if a.Is6() == v6 {
			return a, true
		}
	}
	return netip.Addr{}, false
}
