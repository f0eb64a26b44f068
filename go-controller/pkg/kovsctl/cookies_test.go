package kovsctl

import (
	"context"
	"net/netip"
	"strconv"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/kovs-net/kovs/go-controller/pkg/controller/networkpolicy"
	"github.com/kovs-net/kovs/go-controller/pkg/ovs"
	"github.com/kovs-net/kovs/go-controller/pkg/pipeline"
)

// namedPortPolicy allows TCP 80 and the named port "http" from anywhere to app=web in
// namespace x, and egress to anything; web pods resolve "http" to 8080 or 9090.
func namedPortPolicy() (*networkingv1.NetworkPolicy, []*corev1.Pod) {
	tcp := corev1.ProtocolTCP
	http, p80 := intstr.FromString("http"), intstr.FromInt32(80)
	np := &networkingv1.NetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{Namespace: "x", Name: "web", UID: "np-web"},
		Spec: networkingv1.NetworkPolicySpec{
			PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}},
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress, networkingv1.PolicyTypeEgress},
			Ingress: []networkingv1.NetworkPolicyIngressRule{{Ports: []networkingv1.NetworkPolicyPort{
				{Protocol: &tcp, Port: &p80}, {Protocol: &tcp, Port: &http}}}},
			Egress: []networkingv1.NetworkPolicyEgressRule{{}},
		},
	}
	var pods []*corev1.Pod
	for i, port := range []int32{8080, 9090} {
		name := "web-" + strconv.Itoa(i)
		pods = append(pods, &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: "x", Name: name, UID: types.UID("uid-" + name), Labels: map[string]string{"app": "web"}},
			Spec: corev1.PodSpec{NodeName: "node-1", Containers: []corev1.Container{{Name: "c",
				Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: port}}}}},
			Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIPs: []corev1.PodIP{{IP: "10.244.1." + strconv.Itoa(10+i)}}},
		})
	}
	return np, pods
}

// TestPolicyRuleNamesMatchTheCompiler: every rule kovs-controller compiles from the
// NetworkPolicies is named by kovsctl from the API objects alone, named-port splits
// included (for the traced protocol and port).
func TestPolicyRuleNamesMatchTheCompiler(t *testing.T) {
	np, pods := namedPortPolicy()
	shares := networkpolicy.Compile([]*corev1.Namespace{{ObjectMeta: metav1.ObjectMeta{Name: "x"}}}, pods, []*networkingv1.NetworkPolicy{np})
	a := Access{Client: fake.NewClientset(np)}
	for id := range shares["node-1"].Rules {
		proto, port := "tcp", 80
		if parts := strings.Split(id, "/"); len(parts) == 5 {
			p, number, _ := strings.Cut(parts[4], "-")
			proto, port = p, atoi(t, number)
		}
		rules, err := a.listPolicyRules(context.Background(), proto, port)
		if err != nil {
			t.Fatal(err)
		}
		name, ok := rules.name(pipeline.PolicyRuleObjectID(id))
		if !ok || !strings.HasPrefix(name, "x/web ") {
			t.Errorf("rule %s: kovsctl names it %q (%v)", id, name, ok)
		}
	}
	if len(shares["node-1"].Rules) != 4 {
		t.Errorf("compiled rules = %v, want ingress 0, its two named-port splits and egress 0", shares["node-1"].Rules)
	}
}

func atoi(t *testing.T, s string) int {
	t.Helper()
	n, err := strconv.Atoi(s)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func TestDescribePolicyCookies(t *testing.T) {
	np, _ := namedPortPolicy()
	rules := policyRules{}
	rules.addPolicy(np, "tcp", 8080)
	owners := cookieOwners{rules: rules, services: serviceNames{pipeline.ServiceObjectID("x/web:http/TCP"): "x/web:http/TCP"}}
	ports := map[int]string{3: "pod x/web-0"}
	for _, tc := range []struct {
		cookie pipeline.Cookie
		want   string
	}{
		{pipeline.NewPolicyCookie(1, pipeline.PolicyKindRule, pipeline.PolicyRuleObjectID("x/web/ingress/0")),
			"NetworkPolicy x/web ingress rule 0"},
		{pipeline.NewPolicyCookie(1, pipeline.PolicyKindRule, pipeline.PolicyRuleObjectID("x/web/ingress/0/tcp-8080")),
			`NetworkPolicy x/web ingress rule 0 (port "http" = tcp/8080)`},
		{pipeline.NewPolicyCookie(1, pipeline.PolicyKindRule, pipeline.PolicyRuleObjectID("x/web/egress/0")),
			"NetworkPolicy x/web egress rule 0"},
		{pipeline.NewPolicyCookie(1, pipeline.PolicyKindIngressDeny, 3), "default deny of x/web-0 (isolated for ingress)"},
		{pipeline.NewPolicyCookie(1, pipeline.PolicyKindEgressDeny, 3), "default deny of x/web-0 (isolated for egress)"},
		{pipeline.NewPolicyCookie(1, pipeline.PolicyKindPending, 3),
			"default deny of x/web-0 (its NetworkPolicy has not arrived from kovs-controller yet)"},
		{pipeline.NewPolicyCookie(1, pipeline.PolicyKindRule, 7), "NetworkPolicy rule 0x7 (no current NetworkPolicy rule has this ID hash)"},
		{pipeline.NewCookie(1, pipeline.CategoryLearned, 0), "learned SCTP reply (of an association policy allowed)"},
		{pipeline.NewCookie(1, pipeline.CategoryLearned, 7) | 1<<32, "learned SCTP Service translation (an association's pin to its endpoint, or its replies' un-NAT)"},
		{pipeline.NewCookie(1, pipeline.CategoryService, pipeline.ServiceObjectID("x/web:http/TCP")), "Service x/web:http/TCP"},
		{pipeline.NewCookie(1, pipeline.CategoryService, 0), "Service hairpin (a pod reaching itself through a Service)"},
	} {
		if got := owners.describe(tc.cookie, ports); got != tc.want {
			t.Errorf("describe(%s) = %q, want %q", tc.cookie, got, tc.want)
		}
	}
}

// TestVerdictNamesTheAllowingRules: a delivered packet's verdict names the rules that
// let it through on each node; a dropped one the default deny that stopped it.
func TestVerdictNamesTheAllowingRules(t *testing.T) {
	np, _ := namedPortPolicy()
	rules := policyRules{}
	rules.addPolicy(np, "tcp", 80)
	egress := pipeline.NewPolicyCookie(1, pipeline.PolicyKindRule, pipeline.PolicyRuleObjectID("x/web/egress/0"))
	ingress := pipeline.NewPolicyCookie(1, pipeline.PolicyKindRule, pipeline.PolicyRuleObjectID("x/web/ingress/0"))
	r := &TraceResult{owners: cookieOwners{rules: rules}, Hops: []Hop{
		{Node: "node-1", Parsed: ovs.Trace{Steps: []ovs.TraceStep{{Table: 50, Cookie: uint64(egress)}}, OutputPorts: []int{1}}},
		{Node: "node-2", Parsed: ovs.Trace{Steps: []ovs.TraceStep{{Table: 70, Cookie: uint64(ingress)}}, OutputPorts: []int{4}},
			ports: map[int]string{4: "pod x/web-1"}},
	}}
	want := "delivered on node-2 to pod x/web-1; allowed by NetworkPolicy x/web egress rule 0 on node-1, " +
		"NetworkPolicy x/web ingress rule 0 on node-2"
	if got := r.verdict(); got != want {
		t.Errorf("verdict = %q\nwant      %q", got, want)
	}
	r.Hops[1].Parsed = ovs.Trace{Steps: []ovs.TraceStep{{Table: 70, Cookie: uint64(pipeline.NewPolicyCookie(1, pipeline.PolicyKindIngressDeny, 4))}}}
	want = "DROPPED on node-2 in table 70 IngressPolicy by default deny of x/web-1 (isolated for ingress)"
	if got := r.verdict(); got != want {
		t.Errorf("verdict = %q\nwant      %q", got, want)
	}
}

func TestPacketSpecNamesPortsPerProtocol(t *testing.T) {
	for proto, want := range map[string]string{"tcp": "tcp_src=40000,tcp_dst=53", "udp": "udp_src=40000,udp_dst=53",
		"sctp": "sctp_src=40000,sctp_dst=53"} {
		p := newPacket(proto, 3, nil, nil, netip.Addr{}, netip.Addr{}, 53)
		if got := p.TraceFlow(); !strings.HasSuffix(got, want) {
			t.Errorf("%s spec = %s, want it to end in %s", proto, got, want)
		}
	}
}
