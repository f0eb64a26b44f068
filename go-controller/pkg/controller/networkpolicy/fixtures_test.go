package networkpolicy

import (
	"fmt"
	"net/netip"
	"strconv"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/kovs-net/kovs/go-controller/pkg/policy"
)

// world is a small cluster modelled on the upstream NetworkPolicy e2e tests: namespaces
// x, y, z (labelled ns=<name>), each with pods a, b, c (labelled pod=<name>), spread over
// two nodes, every pod serving TCP/UDP/SCTP 80 and 81 under names like serve-80-tcp, and
// "http" meaning 8080 on a, 9090 on b and nothing on c.
type world struct {
	namespaces []*corev1.Namespace
	pods       []*corev1.Pod
	policies   []*networkingv1.NetworkPolicy
}

func newWorld() *world {
	w := &world{}
	for i, ns := range []string{"x", "y", "z"} {
		w.namespaces = append(w.namespaces, namespaceObj(ns, "ns="+ns))
		for j, name := range []string{"a", "b", "c"} {
			node := "node-1"
			if j == 1 {
				node = "node-2"
			}
			p := podObj(ns, name, node, "pod="+name)
			p.Status.PodIPs = []corev1.PodIP{{IP: fmt.Sprintf("10.0.%d.%d", i, j+1)}}
			p.Spec.Containers = []corev1.Container{{Name: "c", Ports: servePorts()}}
			switch name {
			case "a":
				p.Spec.Containers[0].Ports = append(p.Spec.Containers[0].Ports, corev1.ContainerPort{Name: "http", ContainerPort: 8080})
			case "b":
				p.Spec.Containers[0].Ports = append(p.Spec.Containers[0].Ports, corev1.ContainerPort{Name: "http", ContainerPort: 9090})
			}
			w.pods = append(w.pods, p)
		}
	}
	return w
}

func servePorts() []corev1.ContainerPort {
	var ports []corev1.ContainerPort
	for _, port := range []int32{80, 81} {
		for _, proto := range []corev1.Protocol{corev1.ProtocolTCP, corev1.ProtocolUDP, corev1.ProtocolSCTP} {
			ports = append(ports, corev1.ContainerPort{Name: fmt.Sprintf("serve-%d-%s", port, strings.ToLower(string(proto))),
				ContainerPort: port, Protocol: proto})
		}
	}
	return ports
}

func (w *world) pod(key string) *corev1.Pod {
	for _, p := range w.pods {
		if p.Namespace+"/"+p.Name == key {
			return p
		}
	}
	panic("no pod " + key)
}

// model loads the world's namespaces, pods and policies into a new model, uncommitted.
func (w *world) model() *model {
	m := newModel()
	for _, ns := range w.namespaces {
		m.setNamespace(ns.Name, ns)
	}
	for _, p := range w.pods {
		m.setPod(podKey(p), p)
	}
	for _, np := range w.policies {
		m.setPolicy(objectKey(np), np)
	}
	return m
}

func (w *world) compile() map[string]policy.NodeShare {
	return Compile(w.namespaces, w.pods, w.policies)
}

func namespaceObj(name string, labels ...string) *corev1.Namespace {
	return &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labelSet(labels...)}}
}

func podObj(ns, name, node string, labels ...string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID("uid-" + ns + "-" + name), Labels: labelSet(labels...)},
		Spec:       corev1.PodSpec{NodeName: node},
		Status:     corev1.PodStatus{Phase: corev1.PodRunning},
	}
}

func labelSet(kv ...string) map[string]string {
	if len(kv) == 0 {
		return nil
	}
	m := map[string]string{}
	for _, s := range kv {
		k, v, _ := strings.Cut(s, "=")
		m[k] = v
	}
	return m
}

// policyObj builds a policy; types nil leaves policyTypes to the defaulting.
func policyObj(ns, name string, selector *metav1.LabelSelector, types []networkingv1.PolicyType,
	ingress []networkingv1.NetworkPolicyIngressRule, egress []networkingv1.NetworkPolicyEgressRule) *networkingv1.NetworkPolicy {
	np := &networkingv1.NetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types2UID(ns, name)},
		Spec:       networkingv1.NetworkPolicySpec{PolicyTypes: types, Ingress: ingress, Egress: egress},
	}
	if selector != nil {
		np.Spec.PodSelector = *selector
	}
	return np
}

func types2UID(ns, name string) types.UID { return types.UID("np-" + ns + "-" + name) }

func ingressOnly() []networkingv1.PolicyType {
	return []networkingv1.PolicyType{networkingv1.PolicyTypeIngress}
}

func egressOnly() []networkingv1.PolicyType {
	return []networkingv1.PolicyType{networkingv1.PolicyTypeEgress}
}

func bothTypes() []networkingv1.PolicyType {
	return []networkingv1.PolicyType{networkingv1.PolicyTypeIngress, networkingv1.PolicyTypeEgress}
}

func sel(kv ...string) *metav1.LabelSelector {
	return &metav1.LabelSelector{MatchLabels: labelSet(kv...)}
}

func expr(key string, op metav1.LabelSelectorOperator, values ...string) *metav1.LabelSelector {
	return &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: key, Operator: op, Values: values}}}
}

func podPeer(s *metav1.LabelSelector) networkingv1.NetworkPolicyPeer {
	return networkingv1.NetworkPolicyPeer{PodSelector: s}
}

func nsPeer(s *metav1.LabelSelector) networkingv1.NetworkPolicyPeer {
	return networkingv1.NetworkPolicyPeer{NamespaceSelector: s}
}

func bothPeer(ns, pod *metav1.LabelSelector) networkingv1.NetworkPolicyPeer {
	return networkingv1.NetworkPolicyPeer{NamespaceSelector: ns, PodSelector: pod}
}

func blockPeer(cidr string, except ...string) networkingv1.NetworkPolicyPeer {
	return networkingv1.NetworkPolicyPeer{IPBlock: &networkingv1.IPBlock{CIDR: cidr, Except: except}}
}

func from(peers ...networkingv1.NetworkPolicyPeer) networkingv1.NetworkPolicyIngressRule {
	return networkingv1.NetworkPolicyIngressRule{From: peers}
}

func to(peers ...networkingv1.NetworkPolicyPeer) networkingv1.NetworkPolicyEgressRule {
	return networkingv1.NetworkPolicyEgressRule{To: peers}
}

func in(rules ...networkingv1.NetworkPolicyIngressRule) []networkingv1.NetworkPolicyIngressRule {
	if rules == nil {
		return []networkingv1.NetworkPolicyIngressRule{}
	}
	return rules
}

func out(rules ...networkingv1.NetworkPolicyEgressRule) []networkingv1.NetworkPolicyEgressRule {
	if rules == nil {
		return []networkingv1.NetworkPolicyEgressRule{}
	}
	return rules
}

// port parses "tcp/80", "udp/80-90", "sctp", "http" (named, TCP), "udp/dns" or "/80"
// (no protocol: TCP by default).
func port(s string) networkingv1.NetworkPolicyPort {
	var p networkingv1.NetworkPolicyPort
	protoStr, rest, hasSlash := strings.Cut(s, "/")
	if !hasSlash {
		if pr := strings.ToUpper(s); pr == "TCP" || pr == "UDP" || pr == "SCTP" {
			proto := corev1.Protocol(pr)
			p.Protocol = &proto
			return p
		}
		protoStr, rest = "", s
	}
	if protoStr != "" {
		proto := corev1.Protocol(strings.ToUpper(protoStr))
		p.Protocol = &proto
	}
	first, last, isRange := strings.Cut(rest, "-")
	n, err := strconv.Atoi(first)
	if err != nil {
		v := intstr.FromString(rest)
		p.Port = &v
		return p
	}
	v := intstr.FromInt32(int32(n))
	p.Port = &v
	if isRange {
		n, _ := strconv.Atoi(last)
		end := int32(n)
		p.EndPort = &end
	}
	return p
}

func ports(ss ...string) []networkingv1.NetworkPolicyPort {
	out := make([]networkingv1.NetworkPolicyPort, len(ss))
	for i, s := range ss {
		out[i] = port(s)
	}
	return out
}

// flow is "src dst proto/port", where src and dst are pods ("x/a") or addresses.
func (w *world) allowed(t *testing.T, shares map[string]policy.NodeShare, flow string) bool {
	t.Helper()
	f := strings.Fields(flow)
	if len(f) != 3 {
		t.Fatalf("bad flow %q", flow)
	}
	protoStr, portStr, _ := strings.Cut(f[2], "/")
	proto := policy.Protocol(strings.ToUpper(protoStr))
	n, _ := strconv.Atoi(portStr)
	srcKey, srcIP, srcNode := w.endpoint(t, f[0])
	dstKey, dstIP, dstNode := w.endpoint(t, f[1])
	if srcNode != "" && !shares[srcNode].AllowsEgress(srcKey, dstIP, proto, int32(n)) {
		return false
	}
	return dstNode == "" || shares[dstNode].AllowsIngress(dstKey, srcIP, proto, int32(n))
}

// endpoint resolves a flow end: a pod (its first address, or the one of the family of an
// "@6" suffix) or an address outside the pods.
func (w *world) endpoint(t *testing.T, s string) (policy.PodKey, netip.Addr, string) {
	t.Helper()
	if ip, err := netip.ParseAddr(s); err == nil {
		return policy.PodKey{}, ip, ""
	}
	name, family, _ := strings.Cut(s, "@")
	p := w.pod(name)
	var ip netip.Addr
	for _, a := range podIPs(p) {
		if !ip.IsValid() || (family == "6" && a.Is6()) {
			ip = a
		}
	}
	node := p.Spec.NodeName
	if p.Spec.HostNetwork {
		node = "" // host-network traffic is the node's: no pod policy applies
	}
	return policy.PodKey{Namespace: p.Namespace, Name: p.Name}, ip, node
}
