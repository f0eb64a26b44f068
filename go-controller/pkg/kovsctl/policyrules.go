package kovsctl

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/kovs-net/kovs/go-controller/pkg/pipeline"
)

// policyRules names NetworkPolicy rules by the object of their flows' cookies
// (pipeline.PolicyRuleObjectID of the rule ID), e.g. "x/web ingress rule 0".
type policyRules map[uint32][]string

// listPolicyRules reads every NetworkPolicy and names its rules under the IDs
// kovs-controller gives them: "<namespace>/<policy>/<ingress|egress>/<index>", and for a
// rule with named ports the rules they are split into, "/<protocol>-<port>". The numbers a
// name resolves to depend on the pods, so the split rules are named for the traced
// packet's protocol and port (the only ones that can have allowed it).
func (a Access) listPolicyRules(ctx context.Context, proto string, port int) (policyRules, error) {
	list, err := a.Client.NetworkingV1().NetworkPolicies("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("list NetworkPolicies to name the rules in the trace: %w", err)
	}
	rules := policyRules{}
	for i := range list.Items {
		rules.addPolicy(&list.Items[i], proto, port)
	}
	return rules, nil
}

// addPolicy names the rules of one policy.
func (r policyRules) addPolicy(np *networkingv1.NetworkPolicy, proto string, port int) {
	for i, rule := range np.Spec.Ingress {
		r.addRule(np, "ingress", i, rule.Ports, proto, port)
	}
	for i, rule := range np.Spec.Egress {
		r.addRule(np, "egress", i, rule.Ports, proto, port)
	}
}

func (r policyRules) addRule(np *networkingv1.NetworkPolicy, dir string, index int, ports []networkingv1.NetworkPolicyPort,
	proto string, port int) {
	id := np.Namespace + "/" + np.Name + "/" + dir + "/" + strconv.Itoa(index)
	name := fmt.Sprintf("%s/%s %s rule %d", np.Namespace, np.Name, dir, index)
	r.add(id, name)
	for _, p := range ports {
		protocol := "tcp"
		if p.Protocol != nil {
			protocol = strings.ToLower(string(*p.Protocol))
		}
		if p.Port == nil || p.Port.Type != intstr.String || protocol != proto {
			continue
		}
		split := fmt.Sprintf("%s/%s-%d", id, protocol, port)
		r.add(split, fmt.Sprintf("%s (port %q = %s/%d)", name, p.Port.StrVal, protocol, port))
	}
}

func (r policyRules) add(id, name string) {
	obj := pipeline.PolicyRuleObjectID(id)
	for _, have := range r[obj] {
		if have == name {
			return
		}
	}
	r[obj] = append(r[obj], name)
}

// name is the rule a cookie object stands for ("a or b" on a hash collision).
func (r policyRules) name(obj uint32) (string, bool) {
	names, ok := r[obj]
	if !ok {
		return "", false
	}
	return strings.Join(names, " or "), true
}
