package kovsctl

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/kovs-net/kovs/go-controller/pkg/ovs"
	"github.com/kovs-net/kovs/go-controller/pkg/pipeline"
)

func flow(t *testing.T, line string) ovs.FlowEntry {
	t.Helper()
	f, err := ovs.ParseFlow(line)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

func TestPodFlowsSelectWhatReferencesThePod(t *testing.T) {
	sel := podFlows{ofport: 3, values: map[string]bool{"10.244.1.2": true, "0a:58:0a:f4:01:02": true}}
	for line, want := range map[string]bool{
		"cookie=0x1030000000003, priority=200,in_port=3 actions=goto_table:10":                                           true,  // owned
		"cookie=0x1050300000003, table=70, priority=50,reg1=0x3 actions=drop":                                            true,  // its default deny
		"cookie=0x1050223da9b4c, table=70, priority=100,reg1=0x3 actions=conjunction(601529164,1/3)":                     true,  // applied-to clause
		"cookie=0x1050223da9b4c, table=50, priority=100,ip,nw_dst=10.244.1.2 actions=conjunction(286015,2/3)":            true,  // peer clause
		"cookie=0x1020000000002, table=20, priority=100,arp,dl_dst=0a:58:0a:f4:01:02,arp_op=2 actions=output:2":          true,  // its MAC
		"cookie=0x1030000000004, priority=200,in_port=4 actions=goto_table:10":                                           false, // another pod
		"cookie=0x1050300000004, table=70, priority=50,reg1=0x4 actions=drop":                                            false,
		"cookie=0x1050223da9b4c, table=50, priority=100,ip,nw_dst=10.244.1.20 actions=conjunction(286015,2/3)":           false, // prefix of another address
		"cookie=0x10400124e2d2d, table=60, priority=150,ip,nw_dst=10.244.1.0/24 actions=goto_table:61":                   false,
		"cookie=0x1010000000000, table=70, priority=0 actions=goto_table:80":                                             false,
		"cookie=0x1050400000003, table=50, priority=50,in_port=3 actions=drop":                                           true,
		"cookie=0x10400124e2d2d, priority=200,tun_id=0x64,tun_src=172.30.0.2,in_port=1 actions=goto_table:30":            false,
		"cookie=0x1030000000013, table=60, priority=200,ip,nw_dst=10.244.1.9 actions=set_field:0x13->reg1,goto_table:61": false, // ofport 19
	} {
		if got := sel.selects(flow(t, line)); got != want {
			t.Errorf("selects(%s) = %v, want %v", line, got, want)
		}
	}
}

func TestPolicyFlowsSelectRulesClausesAndDenies(t *testing.T) {
	rule := pipeline.PolicyRuleObjectID("x/web/ingress/0")
	other := pipeline.PolicyRuleObjectID("x/other/ingress/0")
	ruleCookie := pipeline.NewPolicyCookie(1, pipeline.PolicyKindRule, rule)
	// A clause shared with another rule is named after that (lower) rule.
	sharedClause := pipeline.NewPolicyCookie(1, pipeline.PolicyKindClause, other)
	sel := policyFlows{rules: map[uint32]bool{rule: true}, conjIDs: map[uint32]bool{},
		isolated: map[pipeline.PolicyKind]map[uint32]bool{pipeline.PolicyKindIngressDeny: {5: true}, pipeline.PolicyKindEgressDeny: {}}}
	all := []ovs.FlowEntry{
		{Cookie: uint64(ruleCookie), Table: 70, Priority: 100, Match: "conj_id=77", Actions: "goto_table:80"},
		{Cookie: uint64(sharedClause), Table: 70, Priority: 100, Match: "reg1=0x5", Actions: "conjunction(12,1/2),conjunction(77,1/3)"},
		{Cookie: uint64(sharedClause), Table: 70, Priority: 100, Match: "reg1=0x6", Actions: "conjunction(12,1/2)"},
		{Cookie: uint64(pipeline.NewPolicyCookie(1, pipeline.PolicyKindIngressDeny, 5)), Table: 70, Priority: 50, Match: "reg1=0x5", Actions: "drop"},
		{Cookie: uint64(pipeline.NewPolicyCookie(1, pipeline.PolicyKindIngressDeny, 6)), Table: 70, Priority: 50, Match: "reg1=0x6", Actions: "drop"},
		{Cookie: uint64(pipeline.NewPolicyCookie(1, pipeline.PolicyKindEgressDeny, 5)), Table: 50, Priority: 50, Match: "in_port=5", Actions: "drop"},
		{Cookie: uint64(pipeline.NewCookie(1, pipeline.CategoryPod, 5)), Table: 0, Priority: 200, Match: "in_port=5", Actions: "goto_table:10"},
	}
	for _, f := range all {
		if id, ok := conjIDOf(f.Match); ok && pipeline.Cookie(f.Cookie).PolicyKind() == pipeline.PolicyKindRule && sel.rules[pipeline.Cookie(f.Cookie).Object()] {
			sel.conjIDs[id] = true
		}
	}
	want := []bool{true, true, false, true, false, false, false}
	for i, f := range all {
		if got := sel.selects(f); got != want[i] {
			t.Errorf("flow %d (%s): selected %v, want %v", i, f, got, want[i])
		}
	}
}

func TestRuleIDsResolveNamedPortsThroughPods(t *testing.T) {
	tcp, udp := corev1.ProtocolTCP, corev1.ProtocolUDP
	http, dns := intstr.FromString("http"), intstr.FromString("dns")
	np := &networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: "x", Name: "web"},
		Spec: networkingv1.NetworkPolicySpec{
			Ingress: []networkingv1.NetworkPolicyIngressRule{{Ports: []networkingv1.NetworkPolicyPort{{Protocol: &tcp, Port: &http}}}},
			Egress:  []networkingv1.NetworkPolicyEgressRule{{Ports: []networkingv1.NetworkPolicyPort{{Protocol: &udp, Port: &dns}}}, {}},
		}}
	pods := []corev1.Pod{
		{Spec: corev1.PodSpec{Containers: []corev1.Container{{Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 8080}}}}}},
		{Spec: corev1.PodSpec{Containers: []corev1.Container{{Ports: []corev1.ContainerPort{{Name: "dns", ContainerPort: 53, Protocol: udp}, {Name: "dns", ContainerPort: 5353}}}}}},
	}
	got := map[string]bool{}
	for _, id := range ruleIDs(np, pods) {
		got[id] = true
	}
	for _, id := range []string{"x/web/ingress/0", "x/web/ingress/0/tcp-8080", "x/web/egress/0", "x/web/egress/0/udp-53", "x/web/egress/1"} {
		if !got[id] {
			t.Errorf("rule IDs %v lack %s", got, id)
		}
	}
	if got["x/web/egress/0/udp-5353"] || len(got) != 5 {
		t.Errorf("rule IDs %v: the TCP port named dns is not the UDP one", got)
	}
}

func TestIsolatedDirections(t *testing.T) {
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "x", Name: "db", Labels: map[string]string{"app": "db"}}}
	sel := metav1.LabelSelector{MatchLabels: map[string]string{"app": "db"}}
	cases := []struct {
		name string
		np   networkingv1.NetworkPolicy
		want []networkingv1.PolicyType
	}{
		{"policyTypes as written", networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: "x"},
			Spec: networkingv1.NetworkPolicySpec{PodSelector: sel, PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeEgress}}},
			[]networkingv1.PolicyType{networkingv1.PolicyTypeEgress}},
		{"no policyTypes, no egress rules", networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: "x"},
			Spec: networkingv1.NetworkPolicySpec{PodSelector: sel}},
			[]networkingv1.PolicyType{networkingv1.PolicyTypeIngress}},
		{"no policyTypes, egress rules", networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: "x"},
			Spec: networkingv1.NetworkPolicySpec{PodSelector: sel, Egress: []networkingv1.NetworkPolicyEgressRule{{}}}},
			[]networkingv1.PolicyType{networkingv1.PolicyTypeIngress, networkingv1.PolicyTypeEgress}},
		{"other namespace", networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: "y"},
			Spec: networkingv1.NetworkPolicySpec{PodSelector: sel}}, nil},
		{"selector does not match", networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: "x"},
			Spec: networkingv1.NetworkPolicySpec{PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}}}}, nil},
	}
	for _, c := range cases {
		got := isolatedDirections(&c.np, pod)
		if len(got) != len(c.want) {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
			continue
		}
		for i := range got {
			if got[i] != c.want[i] {
				t.Errorf("%s: %v, want %v", c.name, got, c.want)
			}
		}
	}
}

// TestDeniedVerdictNamesTheIsolatingPolicies: a packet that ends in a pod's default deny
// names, from the API, the policies that isolate the pod in that direction and their rules.
func TestDeniedVerdictNamesTheIsolatingPolicies(t *testing.T) {
	np, pods := namedPortPolicy()
	denyAll := &networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: "x", Name: "deny-all"},
		Spec: networkingv1.NetworkPolicySpec{PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress}}}
	egressOnly := &networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: "x", Name: "egress-only"},
		Spec: networkingv1.NetworkPolicySpec{PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeEgress}}}
	a := Access{Client: fake.NewClientset(np, denyAll, egressOnly, pods[1])}
	r := &TraceResult{Hops: []Hop{{Node: "node-1", ports: map[int]string{4: "pod x/web-1"},
		Parsed: ovs.Trace{Steps: []ovs.TraceStep{{Table: 70, Cookie: uint64(pipeline.NewPolicyCookie(1, pipeline.PolicyKindIngressDeny, 4))}}}}}}
	a.explainDeny(context.Background(), r)
	want := "DROPPED on node-1 in table 70 IngressPolicy by default deny of x/web-1 (isolated for ingress by NetworkPolicy " +
		"x/deny-all, x/web; none of their ingress rules (x/web ingress rule 0) allows this packet)"
	if got := r.verdict(); got != want {
		t.Errorf("verdict = %q\nwant      %q", got, want)
	}
}
