package netpol_test

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/yaml"

	"github.com/kovs-net/kovs/test/e2e/netpol/policymodel"
	"github.com/kovs-net/kovs/test/e2e/netpol/refmodel"
)

// generatedPerSeed is the number of random cases TestCasesGenerated draws from each seed.
const generatedPerSeed = 200

// generatedFixedSeed is the seed every run draws from; the run's second seed is new each
// time (printed), or KOVS_NETPOL_SEED to replay one.
const generatedFixedSeed = 33

// TestCasesGenerated checks random policies over the standard x/y/z pods offline against
// the two models: kovs's own (policymodel) and kube-network-policies' evaluator
// (refmodel). A case is 1 to 3 policies of either direction with podSelector,
// namespaceSelector and ipBlock peers (with except), numbered, ranged, named and
// whole-protocol ports over TCP, UDP and SCTP, in an IPv4, IPv6 or dual-stack cluster;
// every pair of pods is judged on TCP, UDP and SCTP 80 and 81. A disagreement fails with
// the seed, the case's number and its policies.
func TestCasesGenerated(t *testing.T) {
	seed := time.Now().UnixNano()
	if s := os.Getenv("KOVS_NETPOL_SEED"); s != "" {
		var err error
		if seed, err = strconv.ParseInt(s, 10, 64); err != nil {
			t.Fatalf("KOVS_NETPOL_SEED=%q: want an integer seed: %v", s, err)
		}
	}
	t.Logf("seeds: %d (fixed) and %d (this run's; replay it with KOVS_NETPOL_SEED=%d)", generatedFixedSeed, seed, seed)
	ref, err := refmodel.New()
	if err != nil {
		t.Fatal(err)
	}
	ports := []string{"80/tcp", "81/tcp", "80/udp", "81/udp", "80/sctp", "81/sctp"}
	targets := offlineTargets(Case{})
	cells, allowed := 0, 0
	for _, s := range []int64{generatedFixedSeed, seed} {
		g := &generator{r: rand.New(rand.NewPCG(uint64(s), 0))}
		for i := range generatedPerSeed {
			family := pick(g.r, "ipv4", "ipv6", "dual")
			cluster := offlineCluster(Case{}, family)
			g.cluster = cluster
			cluster.Policies = g.policies()
			cs := cellsOf(ports, familiesOf(family), targets)
			got, err := modelVerdicts(cluster, cs)
			if err != nil {
				t.Fatalf("seed %d case %d: kovs's model cannot decide: %v\n%s", s, i, err, policiesYAML(cluster.Policies))
			}
			if split := modelsDisagree(t, ref, cluster, cs, got); len(split) > 0 {
				t.Errorf("seed %d case %d (%s): kovs's model and kube-network-policies disagree on %d of %d cells:\n  %s\npolicies:\n%s",
					s, i, family, len(split), len(cs), strings.Join(split, "\n  "), policiesYAML(cluster.Policies))
			} else if split := compilerDisagrees(t, cluster, cs, got); len(split) > 0 {
				t.Errorf("seed %d case %d (%s): kovs-controller's compiled shares and the models disagree on %d of %d cells:\n  %s\npolicies:\n%s",
					s, i, family, len(split), len(cs), strings.Join(split, "\n  "), policiesYAML(cluster.Policies))
			}
			cells += len(cs)
			for _, ok := range got {
				if ok {
					allowed++
				}
			}
		}
	}
	// Both verdicts must occur, or the generator tests nothing.
	if allowed == 0 || allowed == cells {
		t.Errorf("%d of %d generated cells allowed: the generator draws degenerate policies", allowed, cells)
	}
	t.Logf("%d generated cases, %d cells (%d allowed) judged by both models", 2*generatedPerSeed, cells, allowed)
}

func policiesYAML(pols []networkingv1.NetworkPolicy) string {
	var b strings.Builder
	for _, np := range pols {
		data, err := yaml.Marshal(np)
		if err != nil {
			return err.Error()
		}
		b.WriteString("---\n")
		b.Write(data)
	}
	return b.String()
}

func pick[T any](r *rand.Rand, choices ...T) T { return choices[r.IntN(len(choices))] }

// generator draws random policies over a cluster's pods and addresses.
type generator struct {
	r       *rand.Rand
	cluster *policymodel.Cluster
}

func (g *generator) policies() []networkingv1.NetworkPolicy {
	out := make([]networkingv1.NetworkPolicy, 1+g.r.IntN(3))
	for i := range out {
		np := &out[i]
		np.Name, np.Namespace = fmt.Sprintf("gen-%d", i), pick(g.r, modelNamespaces...)
		np.Spec.PodSelector = *g.podSelector()
		np.Spec.PolicyTypes = pick(g.r, nil, []networkingv1.PolicyType{networkingv1.PolicyTypeIngress},
			[]networkingv1.PolicyType{networkingv1.PolicyTypeEgress},
			[]networkingv1.PolicyType{networkingv1.PolicyTypeIngress, networkingv1.PolicyTypeEgress})
		for range g.r.IntN(3) {
			np.Spec.Ingress = append(np.Spec.Ingress, networkingv1.NetworkPolicyIngressRule{From: g.peers(), Ports: g.ports()})
		}
		for range g.r.IntN(3) {
			np.Spec.Egress = append(np.Spec.Egress, networkingv1.NetworkPolicyEgressRule{To: g.peers(), Ports: g.ports()})
		}
	}
	return out
}

func (g *generator) podSelector() *metav1.LabelSelector {
	return pick(g.r,
		&metav1.LabelSelector{},
		&metav1.LabelSelector{MatchLabels: map[string]string{"pod": pick(g.r, modelPods...)}},
		&metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
			{Key: "pod", Operator: metav1.LabelSelectorOpIn, Values: []string{pick(g.r, modelPods...), pick(g.r, modelPods...)}}}},
		&metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
			{Key: "pod", Operator: metav1.LabelSelectorOpNotIn, Values: []string{pick(g.r, modelPods...)}}}},
		&metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
			{Key: pick(g.r, "pod", "app"), Operator: pick(g.r, metav1.LabelSelectorOpExists, metav1.LabelSelectorOpDoesNotExist)}}},
	)
}

func (g *generator) namespaceSelector() *metav1.LabelSelector {
	ns := pick(g.r, modelNamespaces...)
	return pick(g.r,
		&metav1.LabelSelector{},
		&metav1.LabelSelector{MatchLabels: map[string]string{"ns": ns}},
		&metav1.LabelSelector{MatchLabels: map[string]string{corev1.LabelMetadataName: ns}},
		&metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
			{Key: "ns", Operator: pick(g.r, metav1.LabelSelectorOpIn, metav1.LabelSelectorOpNotIn), Values: []string{ns}}}},
	)
}

// peers draws 0 to 2 peers (none: every peer).
func (g *generator) peers() []networkingv1.NetworkPolicyPeer {
	var out []networkingv1.NetworkPolicyPeer
	for range g.r.IntN(3) {
		switch g.r.IntN(4) {
		case 0:
			out = append(out, networkingv1.NetworkPolicyPeer{PodSelector: g.podSelector()})
		case 1:
			out = append(out, networkingv1.NetworkPolicyPeer{NamespaceSelector: g.namespaceSelector()})
		case 2:
			out = append(out, networkingv1.NetworkPolicyPeer{PodSelector: g.podSelector(), NamespaceSelector: g.namespaceSelector()})
		default:
			out = append(out, networkingv1.NetworkPolicyPeer{IPBlock: g.ipBlock()})
		}
	}
	return out
}

// ipBlock draws a block of either family around a pod's address, from the whole space
// to the pod's own address, with 0 to 2 exceptions strictly inside it (as the API server
// requires), around pods' addresses too.
func (g *generator) ipBlock() *networkingv1.IPBlock {
	pod := pick(g.r, g.cluster.Pods...)
	addr := netip.MustParseAddr(pick(g.r, pod.Status.PodIPs...).IP)
	lengths := []int{0, 16, 23, 24, 32}
	if addr.Is6() {
		lengths = []int{0, 48, 63, 64, 128}
	}
	cidr := netip.PrefixFrom(addr, pick(g.r, lengths...)).Masked()
	b := &networkingv1.IPBlock{CIDR: cidr.String()}
	for range g.r.IntN(3) {
		other := pick(g.r, g.cluster.Pods...)
		for _, ip := range other.Status.PodIPs {
			a := netip.MustParseAddr(ip.IP)
			var inside []int
			for _, l := range lengths {
				if l > cidr.Bits() && a.Is6() == addr.Is6() && cidr.Contains(a) {
					inside = append(inside, l)
				}
			}
			if len(inside) > 0 {
				b.Except = append(b.Except, netip.PrefixFrom(a, pick(g.r, inside...)).Masked().String())
			}
		}
	}
	return b
}

// ports draws 0 to 2 ports (none: every port).
func (g *generator) ports() []networkingv1.NetworkPolicyPort {
	var out []networkingv1.NetworkPolicyPort
	for range g.r.IntN(3) {
		var p networkingv1.NetworkPolicyPort
		if proto := pick(g.r, "", corev1.ProtocolTCP, corev1.ProtocolUDP, corev1.ProtocolSCTP); proto != "" {
			p.Protocol = &proto
		}
		switch g.r.IntN(4) {
		case 0:
			p.Port = ptr(intstr.FromInt32(pick(g.r, int32(80), 81)))
		case 1:
			first := pick(g.r, int32(79), 80, 81)
			p.Port = ptr(intstr.FromInt32(first))
			p.EndPort = ptr(first + pick(g.r, int32(0), 1, 900))
		case 2:
			p.Port = ptr(intstr.FromString(pick(g.r, "serve-80-tcp", "serve-81-tcp", "serve-80-udp", "serve-81-sctp", "no-such-port")))
		}
		out = append(out, p)
	}
	return out
}

func ptr[T any](v T) *T { return &v }
