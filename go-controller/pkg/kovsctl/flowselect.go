package kovsctl

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kovs-net/kovs/go-controller/pkg/ovs"
	"github.com/kovs-net/kovs/go-controller/pkg/pipeline"
)

// podFlows selects the flows of br-int that concern one local pod: the flows it owns
// (cookie category pod, object its ofport), its NetworkPolicy default-deny flows, and every
// other flow whose match names its port (in_port, reg1), its addresses or its MAC, such as
// the clauses of NetworkPolicy rules that have the pod as applied-to pod or as peer.
type podFlows struct {
	ofport uint64
	values map[string]bool // IP and MAC strings as ovs-ofctl prints them
}

func (s podFlows) selects(f ovs.FlowEntry) bool {
	c := pipeline.Cookie(f.Cookie)
	if c.Category() == pipeline.CategoryPod && uint64(c.Object()) == s.ofport {
		return true
	}
	if isDenyKind(c.PolicyKind()) && uint64(c.Object()) == s.ofport {
		return true
	}
	for _, field := range ovs.MatchFields(f.Match) {
		switch field.Name {
		case "in_port", "reg1":
			if n, err := strconv.ParseUint(field.Value, 0, 64); err == nil && n == s.ofport {
				return true
			}
		case "nw_src", "nw_dst", "ipv6_src", "ipv6_dst", "arp_spa", "arp_tpa", "nd_target", "dl_src", "dl_dst",
			"arp_sha", "arp_tha":
			if s.values[strings.ToLower(field.Value)] {
				return true
			}
		}
	}
	return false
}

func isDenyKind(k pipeline.PolicyKind) bool {
	return k == pipeline.PolicyKindIngressDeny || k == pipeline.PolicyKindEgressDeny || k == pipeline.PolicyKindPending
}

// policyFlows selects the flows of one NetworkPolicy: its rules' flows (cookie object the
// rule's ID hash), the conjunction clauses that feed those rules' conj_ids, and the
// default-deny flows of the local pods it isolates (shared with any other policy that
// isolates the same pod in the same direction).
type policyFlows struct {
	rules    map[uint32]bool // cookie objects of the policy's rules
	conjIDs  map[uint32]bool // conj_ids of the policy's rules on this node
	isolated map[pipeline.PolicyKind]map[uint32]bool
}

func (s policyFlows) selects(f ovs.FlowEntry) bool {
	c := pipeline.Cookie(f.Cookie)
	if c.Category() != pipeline.CategoryPolicy {
		return false
	}
	switch k := c.PolicyKind(); k {
	case pipeline.PolicyKindRule, pipeline.PolicyKindClause:
		if s.rules[c.Object()] {
			return true
		}
		for _, id := range ovs.ConjunctionIDs(f.Actions) {
			if s.conjIDs[id] {
				return true
			}
		}
	case pipeline.PolicyKindIngressDeny, pipeline.PolicyKindEgressDeny:
		return s.isolated[k][c.Object()]
	}
	return false
}

// conjIDOf reads the conj_id a rule's flow matches on.
func conjIDOf(match string) (uint32, bool) {
	v, ok := ovs.MatchValue(match, "conj_id")
	if !ok {
		return 0, false
	}
	n, err := strconv.ParseUint(v, 0, 32)
	return uint32(n), err == nil
}

// podSelection builds the --pod filter for a pod with a port on this node.
func (a Access) podSelection(ctx context.Context, o *nodeOVS, key string) (podFlows, error) {
	ofport, err := a.podPortOn(ctx, o, key)
	if err != nil {
		return podFlows{}, err
	}
	sel := podFlows{ofport: uint64(ofport), values: map[string]bool{}}
	ep, err := a.pod(ctx, key)
	if err != nil {
		return podFlows{}, err
	}
	for _, ip := range ep.IPs {
		sel.values[ip.String()] = true
	}
	if ep.MAC != nil {
		sel.values[ep.MAC.String()] = true
	}
	return sel, nil
}

// policySelection builds the --policy filter from the NetworkPolicy, the cluster's pods
// (for named ports and the pods it isolates) and the node's flows and pod ports.
func (a Access) policySelection(ctx context.Context, o *nodeOVS, key string, flows []ovs.FlowEntry) (policyFlows, error) {
	ns, name, ok := strings.Cut(key, "/")
	if !ok {
		return policyFlows{}, fmt.Errorf("policy %q: write it as NAMESPACE/NAME", key)
	}
	np, err := a.Client.NetworkingV1().NetworkPolicies(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return policyFlows{}, fmt.Errorf("policy %s: %w", key, err)
	}
	pods, err := a.Client.CoreV1().Pods("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return policyFlows{}, err
	}
	sel := policyFlows{rules: map[uint32]bool{}, conjIDs: map[uint32]bool{}, isolated: map[pipeline.PolicyKind]map[uint32]bool{
		pipeline.PolicyKindIngressDeny: {}, pipeline.PolicyKindEgressDeny: {}}}
	for _, id := range ruleIDs(np, pods.Items) {
		sel.rules[pipeline.PolicyRuleObjectID(id)] = true
	}
	for _, f := range flows {
		c := pipeline.Cookie(f.Cookie)
		if c.PolicyKind() == pipeline.PolicyKindRule && sel.rules[c.Object()] {
			if id, ok := conjIDOf(f.Match); ok {
				sel.conjIDs[id] = true
			}
		}
	}
	ports, err := o.db.FindPorts(ctx, Bridge, "kovs.io/owner", "pod")
	if err != nil {
		return policyFlows{}, err
	}
	ofports := map[string]uint32{}
	for _, p := range ports {
		ofports[p.ExternalIDs["kovs.io/pod-namespace"]+"/"+p.ExternalIDs["kovs.io/pod-name"]] = uint32(p.Ofport)
	}
	for i := range pods.Items {
		pod := &pods.Items[i]
		ofport, local := ofports[pod.Namespace+"/"+pod.Name]
		if !local {
			continue
		}
		for _, dir := range isolatedDirections(np, pod) {
			kind := pipeline.PolicyKindIngressDeny
			if dir == networkingv1.PolicyTypeEgress {
				kind = pipeline.PolicyKindEgressDeny
			}
			sel.isolated[kind][ofport] = true
		}
	}
	return sel, nil
}

// ruleIDs are the IDs kovs-controller gives the policy's rules (see listPolicyRules),
// with every named port resolved through the container ports of the cluster's pods.
func ruleIDs(np *networkingv1.NetworkPolicy, pods []corev1.Pod) []string {
	var ids []string
	add := func(dir string, i int, ports []networkingv1.NetworkPolicyPort) {
		id := fmt.Sprintf("%s/%s/%s/%d", np.Namespace, np.Name, dir, i)
		ids = append(ids, id)
		for _, p := range ports {
			if p.Port == nil || p.Port.StrVal == "" {
				continue
			}
			proto := corev1.ProtocolTCP
			if p.Protocol != nil {
				proto = *p.Protocol
			}
			for _, n := range namedPortNumbers(pods, p.Port.StrVal, proto) {
				ids = append(ids, fmt.Sprintf("%s/%s-%d", id, strings.ToLower(string(proto)), n))
			}
		}
	}
	for i, r := range np.Spec.Ingress {
		add("ingress", i, r.Ports)
	}
	for i, r := range np.Spec.Egress {
		add("egress", i, r.Ports)
	}
	return ids
}

// namedPortNumbers are the numbers a named port has in the pods' container ports, for one
// protocol (a container port without a protocol is TCP).
func namedPortNumbers(pods []corev1.Pod, name string, proto corev1.Protocol) []int32 {
	var out []int32
	for _, pod := range pods {
		for _, c := range pod.Spec.Containers {
			for _, cp := range c.Ports {
				p := cp.Protocol
				if p == "" {
					p = corev1.ProtocolTCP
				}
				if cp.Name == name && p == proto {
					out = append(out, cp.ContainerPort)
				}
			}
		}
	}
	return out
}
