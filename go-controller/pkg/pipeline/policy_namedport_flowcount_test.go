package pipeline

import (
	"fmt"
	"testing"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/kovs-net/kovs/go-controller/pkg/controller/networkpolicy"
)

// namedPortSet is a flow-count case compiled by the NetworkPolicy compiler: A local pods
// (node-0) selected for egress by one rule whose only port is a name, which every one of
// the A local and P remote pods resolves to one of R numbers, and whose peers are K
// ipBlocks of the whole IPv4 space, each excepting a different pod (so every pod is in
// one of them, as in issue 33).
type namedPortSet struct{ a, p, r, k int }

func (c namedPortSet) compile(t *testing.T, f flowFamilies) ([]PodPort, int) {
	t.Helper()
	local := f.pods(c.a)
	var pods []*corev1.Pod
	newPod := func(name, node, uid, ip string, i int) *corev1.Pod {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name, UID: types.UID(uid),
			Labels: map[string]string{"role": node}},
			Spec: corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "c",
				Ports: []corev1.ContainerPort{{Name: "serve", ContainerPort: int32(1000 + i%c.r)}}}}},
			Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIPs: []corev1.PodIP{{IP: ip}}}}
		return p
	}
	for i := range local {
		local[i].UID = fmt.Sprint("uid-", i)
		pods = append(pods, newPod(local[i].Name, "node-0", local[i].UID, local[i].IPs[0].String(), i))
	}
	for i := range c.p {
		pods = append(pods, newPod(fmt.Sprint("remote-", i), "node-1", fmt.Sprint("uid-r", i),
			nthHost(block(1, false), 10+i).String(), c.a+i))
	}
	var peers []networkingv1.NetworkPolicyPeer
	for i := range c.k {
		except := pods[i%len(pods)].Status.PodIPs[0].IP + "/32"
		peers = append(peers, networkingv1.NetworkPolicyPeer{IPBlock: &networkingv1.IPBlock{CIDR: "0.0.0.0/0", Except: []string{except}}})
	}
	serve := intstr.FromString("serve")
	np := &networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "named"},
		Spec: networkingv1.NetworkPolicySpec{
			PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{"role": "node-0"}},
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeEgress},
			Egress:      []networkingv1.NetworkPolicyEgressRule{{Ports: []networkingv1.NetworkPolicyPort{{Port: &serve}}, To: peers}}}}
	shares := networkpolicy.Compile([]*corev1.Namespace{{ObjectMeta: metav1.ObjectMeta{Name: "default"}}}, pods,
		[]*networkingv1.NetworkPolicy{np})
	share := shares["node-0"]
	if err := share.Validate(); err != nil {
		t.Fatal(err)
	}
	b, err := NewBuilder(f.node(), testRound)
	if err != nil {
		t.Fatal(err)
	}
	return local, len(b.PolicyFlows(share, local))
}

// want is the number of policy flows: A applied-to clause flows (each with the
// conjunctions of the N rules the name splits into), one peer clause flow per address
// of the M pods in the blocks (in the rule of the number it resolves to, so each address
// once), N port clause flows, N conj_id flows and A default denies: 2A + M + 2N. M is
// A+P unless every block excepts the same pod, N at most R: never a product with K.
func (c namedPortSet) want() (int, string) {
	total := c.a + c.p
	numbers := map[int]bool{}
	m := 0
	for j := range total {
		excluded := true
		for i := range c.k {
			excluded = excluded && i%total == j
		}
		if !excluded {
			m++
			numbers[j%c.r] = true
		}
	}
	n := len(numbers)
	return 2*c.a + m + 2*n, fmt.Sprintf("2A+M+2N = 2*%d+%d+2*%d", c.a, m, n)
}

// TestNamedPortThroughIPBlocksFlowCountIsLinear: a named egress port through K ipBlock
// peers compiles to 2A + M + 2N flows (see want), whatever K.
func TestNamedPortThroughIPBlocksFlowCountIsLinear(t *testing.T) {
	for _, a := range []int{1, 5, 20} {
		for _, p := range []int{1, 10, 100} {
			for _, r := range []int{1, 3} {
				for _, k := range []int{1, 2, 8} {
					c := namedPortSet{a: a, p: p, r: r, k: k}
					_, got := c.compile(t, familyIPv4)
					if want, formula := c.want(); got != want {
						t.Errorf("A=%d P=%d R=%d K=%d: %d flows, want %s = %d (K*(A+P) would be %d)", a, p, r, k, got, formula, want, k*(a+p))
					}
				}
			}
		}
	}
}
