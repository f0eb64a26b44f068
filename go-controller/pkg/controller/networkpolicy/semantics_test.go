package networkpolicy

import (
	"fmt"
	"testing"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kovs-net/kovs/go-controller/pkg/controller/ipam"
)

type expect struct {
	flow string // "src dst proto/port"
	want bool
}

type semanticsCase struct {
	name     string
	policies []*networkingv1.NetworkPolicy
	// change, if set, adjusts the world before compiling.
	change func(w *world)
	expect []expect
}

// TestSemantics checks networking.k8s.io/v1 semantics on compiled shares, through the
// reference evaluator of the normalized form: behaviour, not structure.
func TestSemantics(t *testing.T) {
	for _, group := range [][]semanticsCase{isolationCases(), selectorCases(), portCases(), addressCases()} {
		for _, c := range group {
			t.Run(c.name, func(t *testing.T) {
				w := newWorld()
				w.policies = c.policies
				if c.change != nil {
					c.change(w)
				}
				shares := w.compile()
				for name, s := range shares {
					if err := s.Validate(); err != nil {
						t.Fatalf("share of %s: %v", name, err)
					}
				}
				for _, e := range c.expect {
					if got := w.allowed(t, shares, e.flow); got != e.want {
						t.Errorf("%s: allowed = %v, want %v", e.flow, got, e.want)
					}
				}
			})
		}
	}
}

func isolationCases() []semanticsCase {
	return []semanticsCase{
		{name: "no policy allows everything", expect: []expect{
			{"x/a y/b tcp/80", true}, {"z/c x/a udp/81", true}, {"1.2.3.4 x/a sctp/80", true},
		}},
		{name: "default deny ingress isolates only the policy's namespace and direction",
			policies: pols(policyObj("x", "deny", &metav1.LabelSelector{}, nil, nil, nil)),
			expect: []expect{
				{"y/a x/a tcp/80", false}, {"x/b x/a tcp/80", false}, {"1.2.3.4 x/c udp/80", false},
				{"x/a y/a tcp/80", true}, {"y/a y/b tcp/80", true},
			}},
		{name: "policyTypes defaults to Ingress plus Egress when egress rules exist",
			policies: pols(policyObj("x", "np", sel("pod=a"), nil, nil, out(to(podPeer(sel("pod=b")))))),
			expect: []expect{
				{"x/a x/b tcp/80", true}, {"x/a x/c tcp/80", false}, // egress isolated
				{"x/b x/a tcp/80", false}, // ingress isolated, no ingress rule
			}},
		{name: "policyTypes defaults to Ingress only without egress rules",
			policies: pols(policyObj("x", "np", sel("pod=a"), nil, in(from(podPeer(sel("pod=b")))), nil)),
			expect:   []expect{{"x/b x/a tcp/80", true}, {"x/c x/a tcp/80", false}, {"x/a z/c tcp/80", true}}},
		{name: "explicit Egress without rules denies all egress and leaves ingress open",
			policies: pols(policyObj("x", "np", sel("pod=a"), egressOnly(), nil, nil)),
			expect:   []expect{{"x/a x/b tcp/80", false}, {"x/a 8.8.8.8 udp/53", false}, {"x/b x/a tcp/80", true}}},
		{name: "rules of a direction not in policyTypes are ignored",
			policies: pols(
				policyObj("x", "eg", sel("pod=a"), egressOnly(), in(from()), nil),
				policyObj("x", "in", sel("pod=a"), ingressOnly(), nil, out(to()))),
			expect: []expect{{"x/b x/a tcp/80", false}, {"x/a x/b tcp/80", false}}},
		{name: "allow rules form a union across policies",
			policies: pols(
				policyObj("x", "from-b", sel("pod=a"), nil, in(from(podPeer(sel("pod=b")))), nil),
				policyObj("x", "from-c", sel("pod=a"), nil, in(from(podPeer(sel("pod=c")))), nil)),
			expect: []expect{{"x/b x/a tcp/80", true}, {"x/c x/a tcp/80", true}, {"y/b x/a tcp/80", false}}},
		{name: "an empty from allows every source, an empty ingress list none",
			policies: pols(
				policyObj("x", "all", sel("pod=a"), nil, in(from()), nil),
				policyObj("y", "none", sel("pod=a"), nil, in(), nil)),
			expect: []expect{{"z/c x/a tcp/80", true}, {"1.2.3.4 x/a udp/9", true}, {"y/b y/a tcp/80", false}}},
		{name: "an empty to allows every destination",
			policies: pols(policyObj("x", "all", sel("pod=a"), bothTypes(), nil, out(to()))),
			expect:   []expect{{"x/a z/c tcp/80", true}, {"x/a 8.8.8.8 udp/53", true}}},
		{name: "egress and ingress both must allow",
			policies: pols(
				policyObj("x", "a-out", sel("pod=a"), egressOnly(), nil, out(to(nsPeer(sel("ns=y"))))),
				policyObj("y", "b-in", sel("pod=b"), nil, in(from(podPeer(sel("pod=c")))), nil)),
			expect: []expect{{"x/a y/b tcp/80", false}, {"x/a y/a tcp/80", true}, {"y/c y/b tcp/80", true}}},
		{name: "host-network pods are neither isolated nor peers",
			policies: pols(
				policyObj("x", "deny-a", sel("pod=a"), bothTypes(), in(from(podPeer(sel("pod=h")))), nil)),
			change: func(w *world) {
				h := podObj("x", "h", "node-1", "pod=h")
				h.Spec.HostNetwork = true
				h.Status.PodIPs = []corev1.PodIP{{IP: "192.168.0.1"}}
				ha := podObj("x", "ha", "node-1", "pod=a") // selected labels, but host network
				ha.Spec.HostNetwork = true
				ha.Status.PodIPs = []corev1.PodIP{{IP: "192.168.0.1"}}
				w.pods = append(w.pods, h, ha)
			},
			expect: []expect{{"x/h x/a tcp/80", false}, {"x/b x/ha tcp/80", true}, {"x/ha x/b tcp/80", true}}},
		{name: "terminated pods are not selected",
			policies: pols(policyObj("x", "np", sel("pod=a"), nil, in(from(podPeer(sel("pod=b")))), nil)),
			change: func(w *world) {
				w.pod("x/b").Status.Phase = corev1.PodSucceeded
				w.pod("x/a").Status.Phase = corev1.PodFailed
			},
			expect: []expect{{"x/c x/a tcp/80", true}, {"x/b x/c tcp/80", true}}},
	}
}

func selectorCases() []semanticsCase {
	fromB := in(from(podPeer(sel("pod=b"))))
	return []semanticsCase{
		{name: "podSelector peers are in the policy's namespace",
			policies: pols(policyObj("x", "np", sel("pod=a"), nil, fromB, nil)),
			expect:   []expect{{"x/b x/a tcp/80", true}, {"y/b x/a tcp/80", false}, {"x/c x/a tcp/80", false}}},
		{name: "namespaceSelector alone selects every pod of the namespaces",
			policies: pols(policyObj("x", "np", sel("pod=a"), nil, in(from(nsPeer(sel("ns=y")))), nil)),
			expect:   []expect{{"y/a x/a tcp/80", true}, {"y/c x/a tcp/80", true}, {"x/b x/a tcp/80", false}, {"z/b x/a tcp/80", false}}},
		{name: "namespaceSelector and podSelector in one peer are AND",
			policies: pols(policyObj("x", "np", sel("pod=a"), nil, in(from(bothPeer(sel("ns=y"), sel("pod=b")))), nil)),
			expect:   []expect{{"y/b x/a tcp/80", true}, {"y/c x/a tcp/80", false}, {"x/b x/a tcp/80", false}}},
		{name: "separate peers are OR",
			policies: pols(policyObj("x", "np", sel("pod=a"), nil, in(from(nsPeer(sel("ns=y")), podPeer(sel("pod=b")))), nil)),
			expect:   []expect{{"y/c x/a tcp/80", true}, {"x/b x/a tcp/80", true}, {"x/c x/a tcp/80", false}, {"z/b x/a tcp/80", false}}},
		{name: "empty podSelector peer selects the policy's namespace",
			policies: pols(policyObj("x", "np", sel("pod=a"), nil, in(from(podPeer(&metav1.LabelSelector{}))), nil)),
			expect:   []expect{{"x/c x/a tcp/80", true}, {"y/c x/a tcp/80", false}}},
		{name: "empty namespaceSelector peer selects every namespace",
			policies: pols(policyObj("x", "np", sel("pod=a"), nil, in(from(nsPeer(&metav1.LabelSelector{}))), nil)),
			expect:   []expect{{"x/c x/a tcp/80", true}, {"z/b x/a tcp/80", true}, {"1.2.3.4 x/a tcp/80", false}}},
		{name: "matchExpressions In",
			policies: pols(policyObj("x", "np", expr("pod", metav1.LabelSelectorOpIn, "a", "b"), nil, in(), nil)),
			expect:   []expect{{"y/a x/a tcp/80", false}, {"y/a x/b tcp/80", false}, {"y/a x/c tcp/80", true}}},
		{name: "matchExpressions NotIn",
			policies: pols(policyObj("x", "np", sel("pod=a"), nil, in(from(nsPeer(expr("ns", metav1.LabelSelectorOpNotIn, "y")))), nil)),
			expect:   []expect{{"y/b x/a tcp/80", false}, {"z/b x/a tcp/80", true}, {"x/b x/a tcp/80", true}}},
		{name: "matchExpressions Exists and DoesNotExist",
			policies: pols(
				policyObj("x", "exists", sel("pod=a"), nil, in(from(podPeer(expr("tier", metav1.LabelSelectorOpExists)))), nil),
				policyObj("x", "absent", sel("pod=b"), nil, in(from(podPeer(expr("tier", metav1.LabelSelectorOpDoesNotExist)))), nil)),
			change: func(w *world) { w.pod("x/c").Labels["tier"] = "db" },
			expect: []expect{{"x/c x/a tcp/80", true}, {"x/b x/a tcp/80", false}, {"x/c x/b tcp/80", false}, {"x/a x/b tcp/80", true}}},
		{name: "matchLabels and matchExpressions together are AND",
			policies: pols(policyObj("x", "np", &metav1.LabelSelector{MatchLabels: labelSet("pod=a"),
				MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "pod", Operator: metav1.LabelSelectorOpIn, Values: []string{"a", "b"}}}},
				nil, in(), nil)),
			expect: []expect{{"x/c x/a tcp/80", false}, {"x/c x/b tcp/80", true}}},
		{name: "a selector matching nothing allows nothing",
			policies: pols(policyObj("x", "np", sel("pod=a"), nil, in(from(podPeer(sel("pod=nope")))), nil)),
			expect:   []expect{{"x/b x/a tcp/80", false}}},
	}
}

func portCases() []semanticsCase {
	return []semanticsCase{
		{name: "ports by number and protocol, TCP by default",
			policies: pols(policyObj("x", "np", sel("pod=a"), nil,
				in(networkingv1.NetworkPolicyIngressRule{Ports: ports("/80", "udp/81", "sctp/80")}), nil)),
			expect: []expect{{"x/b x/a tcp/80", true}, {"x/b x/a tcp/81", false}, {"x/b x/a udp/81", true},
				{"x/b x/a udp/80", false}, {"x/b x/a sctp/80", true}, {"x/b x/a sctp/81", false}}},
		{name: "a protocol without port allows all its ports",
			policies: pols(policyObj("x", "np", sel("pod=a"), nil, in(networkingv1.NetworkPolicyIngressRule{Ports: ports("udp")}), nil)),
			expect:   []expect{{"x/b x/a udp/1", true}, {"x/b x/a udp/65535", true}, {"x/b x/a tcp/80", false}}},
		{name: "port ranges with endPort",
			policies: pols(policyObj("x", "np", sel("pod=a"), nil, in(networkingv1.NetworkPolicyIngressRule{Ports: ports("tcp/8000-8080")}), nil)),
			expect:   []expect{{"x/b x/a tcp/8000", true}, {"x/b x/a tcp/8080", true}, {"x/b x/a tcp/8081", false}, {"x/b x/a tcp/7999", false}}},
		{name: "ports and peers together",
			policies: pols(policyObj("x", "np", sel("pod=a"), nil,
				in(networkingv1.NetworkPolicyIngressRule{Ports: ports("tcp/80"), From: []networkingv1.NetworkPolicyPeer{podPeer(sel("pod=b"))}}), nil)),
			expect: []expect{{"x/b x/a tcp/80", true}, {"x/b x/a tcp/81", false}, {"x/c x/a tcp/80", false}}},
		{name: "named ingress ports resolve per destination pod",
			policies: pols(policyObj("x", "np", &metav1.LabelSelector{}, nil, in(networkingv1.NetworkPolicyIngressRule{Ports: ports("http")}), nil)),
			expect: []expect{{"y/a x/a tcp/8080", true}, {"y/a x/a tcp/9090", false}, {"y/a x/b tcp/9090", true},
				{"y/a x/b tcp/8080", false}, {"y/a x/c tcp/8080", false}, {"y/a x/c tcp/9090", false}}},
		{name: "named ports match name and protocol",
			policies: pols(policyObj("x", "np", sel("pod=a"), nil, in(networkingv1.NetworkPolicyIngressRule{Ports: ports("udp/serve-81-udp", "serve-80-udp")}), nil)),
			expect:   []expect{{"x/b x/a udp/81", true}, {"x/b x/a tcp/81", false}, {"x/b x/a udp/80", false}, {"x/b x/a tcp/80", false}}},
		{name: "named egress ports resolve per destination pod",
			policies: pols(policyObj("y", "np", sel("pod=a"), egressOnly(), nil,
				out(networkingv1.NetworkPolicyEgressRule{Ports: ports("http"), To: []networkingv1.NetworkPolicyPeer{nsPeer(sel("ns=x"))}}))),
			expect: []expect{{"y/a x/a tcp/8080", true}, {"y/a x/a tcp/9090", false}, {"y/a x/b tcp/9090", true},
				{"y/a x/b tcp/8080", false}, {"y/a x/c tcp/8080", false}, {"y/a z/a tcp/8080", false}}},
		{name: "named egress ports without peers resolve over every pod, never an outside address",
			policies: pols(policyObj("y", "np", sel("pod=a"), egressOnly(), nil,
				out(networkingv1.NetworkPolicyEgressRule{Ports: ports("http", "udp/53")}))),
			expect: []expect{{"y/a z/a tcp/8080", true}, {"y/a z/b tcp/9090", true}, {"y/a z/b tcp/8080", false},
				{"y/a 8.8.8.8 tcp/8080", false}, {"y/a 8.8.8.8 udp/53", true}}},
		{name: "named egress ports resolve on the destination pod through ipBlock peers",
			policies: pols(policyObj("y", "np", sel("pod=a"), egressOnly(), nil,
				out(networkingv1.NetworkPolicyEgressRule{Ports: ports("http", "tcp/443"), To: []networkingv1.NetworkPolicyPeer{blockPeer("0.0.0.0/0")}}))),
			expect: []expect{{"y/a x/a tcp/8080", true}, {"y/a x/b tcp/9090", true}, {"y/a x/b tcp/8080", false},
				{"y/a x/c tcp/8080", false}, {"y/a 8.8.8.8 tcp/8080", false}, {"y/a 8.8.8.8 tcp/443", true}, {"y/a x/a tcp/443", true}}},
		{name: "named egress port through two ipBlocks that each except a pod the other holds",
			policies: pols(policyObj("y", "np", sel("pod=a"), bothTypes(), nil,
				out(networkingv1.NetworkPolicyEgressRule{Ports: ports("serve-81-tcp"), To: []networkingv1.NetworkPolicyPeer{
					blockPeer("0.0.0.0/0", "10.0.2.3/32"), blockPeer("0.0.0.0/0", "10.0.0.1/32")}}))),
			expect: []expect{{"y/a x/a tcp/81", true}, {"y/a z/c tcp/81", true}, {"y/a x/b tcp/81", true}, {"y/a y/b tcp/81", true},
				{"y/a x/a tcp/80", false}, {"y/a x/a udp/81", false}, {"y/a 8.8.8.8 tcp/81", false}}},
		{name: "an ipBlock's except keeps a pod out of a named egress port",
			policies: pols(policyObj("y", "np", sel("pod=a"), egressOnly(), nil,
				out(networkingv1.NetworkPolicyEgressRule{Ports: ports("http"), To: []networkingv1.NetworkPolicyPeer{blockPeer("10.0.0.0/23", "10.0.0.2/32")}}))),
			expect: []expect{{"y/a x/a tcp/8080", true}, {"y/a x/b tcp/9090", false}, {"y/a y/b tcp/9090", true},
				{"y/a z/a tcp/8080", false}, {"y/a 10.0.0.200 tcp/8080", false}}},
		{name: "named egress port over a pod peer and an ipBlock peer",
			policies: pols(policyObj("y", "np", sel("pod=a"), egressOnly(), nil,
				out(networkingv1.NetworkPolicyEgressRule{Ports: ports("http"), To: []networkingv1.NetworkPolicyPeer{
					podPeer(sel("pod=b")), blockPeer("10.0.2.0/24")}}))),
			expect: []expect{{"y/a y/b tcp/9090", true}, {"y/a z/a tcp/8080", true}, {"y/a z/b tcp/9090", true},
				{"y/a x/a tcp/8080", false}, {"y/a x/b tcp/9090", false}}},
		{name: "named ingress ports with ipBlock peers resolve on the destination",
			policies: pols(policyObj("x", "np", &metav1.LabelSelector{}, nil,
				in(networkingv1.NetworkPolicyIngressRule{Ports: ports("http"), From: []networkingv1.NetworkPolicyPeer{blockPeer("1.2.3.0/24")}}), nil)),
			expect: []expect{{"1.2.3.4 x/a tcp/8080", true}, {"1.2.3.4 x/b tcp/9090", true}, {"1.2.3.4 x/b tcp/8080", false},
				{"1.2.4.4 x/a tcp/8080", false}}},
	}
}

func addressCases() []semanticsCase {
	dual := func(w *world) {
		for i, p := range w.pods {
			p.Status.PodIPs = append(p.Status.PodIPs, corev1.PodIP{IP: fmt.Sprintf("fd00::%x", i+10)})
		}
	}
	return []semanticsCase{
		{name: "ipBlock with except, for outside and pod addresses alike",
			policies: pols(policyObj("x", "np", sel("pod=a"), nil, in(from(blockPeer("10.0.0.0/16", "10.0.1.0/24", "10.0.2.2/32"))), nil)),
			expect: []expect{{"x/b x/a tcp/80", true}, {"y/b x/a tcp/80", false}, {"z/a x/a tcp/80", true},
				{"z/b x/a tcp/80", false}, {"10.0.200.1 x/a tcp/80", true}, {"10.1.0.1 x/a tcp/80", false}}},
		{name: "IPv6 ipBlock",
			policies: pols(policyObj("x", "np", sel("pod=a"), nil, in(from(blockPeer("fd00::/64", "fd00::b/128"))), nil)),
			change:   dual,
			expect:   []expect{{"x/c@6 x/a@6 tcp/80", true}, {"x/b@6 x/a@6 tcp/80", false}, {"x/c x/a tcp/80", false}, {"2001::1 x/a@6 tcp/80", false}}},
		{name: "dual-stack pods contribute both addresses",
			policies: pols(policyObj("x", "np", sel("pod=a"), bothTypes(), in(from(podPeer(sel("pod=b")))), out(to(podPeer(sel("pod=c")))))),
			change:   dual,
			expect:   []expect{{"x/b x/a tcp/80", true}, {"x/b@6 x/a@6 tcp/80", true}, {"x/c@6 x/a@6 tcp/80", false}, {"x/a@6 x/c@6 udp/80", true}, {"x/a@6 x/b@6 udp/80", false}}},
		{name: "a named egress port through an IPv4 ipBlock allows only the pods' IPv4 addresses",
			policies: pols(policyObj("y", "np", sel("pod=a"), egressOnly(), nil,
				out(networkingv1.NetworkPolicyEgressRule{Ports: ports("http"), To: []networkingv1.NetworkPolicyPeer{blockPeer("0.0.0.0/0")}}))),
			change: dual,
			expect: []expect{{"y/a x/a tcp/8080", true}, {"y/a@6 x/a@6 tcp/8080", false}}},
		{name: "an address annotation on a pod is never its address (only status.podIPs is)",
			policies: pols(policyObj("x", "np", sel("pod=a"), nil, in(from(podPeer(sel("pod=b")))), nil)),
			change: func(w *world) {
				b := w.pod("x/b")
				b.Annotations = map[string]string{ipam.PodNetworkAnnotationKey: podNetworkAnnotation("10.9.0.5/24", "10.9.0.1")}
			},
			expect: []expect{{"10.9.0.5 x/a tcp/80", false}, {"10.0.0.2 x/a tcp/80", true}}},
		{name: "pods without addresses are isolated anyway",
			policies: pols(policyObj("x", "np", sel("pod=a"), nil, in(), nil)),
			change:   func(w *world) { w.pod("x/a").Status.PodIPs = nil },
			expect:   []expect{{"x/b x/a tcp/80", false}},
		},
	}
}

func pols(p ...*networkingv1.NetworkPolicy) []*networkingv1.NetworkPolicy { return p }

func podNetworkAnnotation(address, gateway string) string {
	return `{"ips":[{"address":"` + address + `","gateway":"` + gateway + `"}],"mac":"0a:58:0a:09:00:05"}`
}
