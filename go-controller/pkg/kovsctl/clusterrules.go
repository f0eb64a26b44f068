package kovsctl

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/network-policy-api/apis/v1beta1"

	"github.com/kovs-net/kovs/go-controller/pkg/pipeline"
)

// listClusterRules names every ClusterNetworkPolicy rule under the ID kovs-controller
// gives it, "<policy>/<ingress|egress>/<index>", and for a destination named port the
// rule it is split into for the traced packet's protocol and port,
// "/<protocol>-<port>": "ClusterNetworkPolicy tenants (Admin 10) ingress rule 0
// "deny-b" (Deny)". Nothing when the API does not serve them.
func (a Access) listClusterRules(ctx context.Context, rules policyRules, proto string, port int) error {
	if a.PolicyAPI == nil {
		return nil
	}
	list, err := a.PolicyAPI.PolicyV1beta1().ClusterNetworkPolicies().List(ctx, metav1.ListOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("list ClusterNetworkPolicies to name the rules in the trace: %w", err)
	}
	for i := range list.Items {
		p := &list.Items[i]
		for j, r := range p.Spec.Ingress {
			rules.addClusterRule(p, "ingress", j, r.Name, r.Action, r.Protocols, proto, port)
		}
		for j, r := range p.Spec.Egress {
			rules.addClusterRule(p, "egress", j, r.Name, r.Action, r.Protocols, proto, port)
		}
	}
	return nil
}

func (r policyRules) addClusterRule(p *v1beta1.ClusterNetworkPolicy, dir string, index int, ruleName string,
	action v1beta1.ClusterNetworkPolicyRuleAction, protocols []v1beta1.ClusterNetworkPolicyProtocol, proto string, port int) {
	id := p.Name + "/" + dir + "/" + strconv.Itoa(index)
	name := fmt.Sprintf("ClusterNetworkPolicy %s (%s %d) %s rule %d", p.Name, p.Spec.Tier, p.Spec.Priority, dir, index)
	if ruleName != "" {
		name += fmt.Sprintf(" %q", ruleName)
	}
	name += " (" + string(action) + ")"
	r.add(id, name)
	for _, pr := range protocols {
		if pr.DestinationNamedPort != "" {
			r.add(fmt.Sprintf("%s/%s-%d", id, strings.ToLower(proto), port),
				fmt.Sprintf("%s (port %q = %s/%d)", name, pr.DestinationNamedPort, proto, port))
		}
	}
}

// describeCluster names a ClusterNetworkPolicy flow: the rule that decided, one of its
// clauses, or the bypass of what NetworkPolicy lets through first.
func (o cookieOwners) describeCluster(c pipeline.Cookie) string {
	switch c.ClusterKind() {
	case pipeline.ClusterKindRule:
		return o.clusterRuleName(c.Object())
	case pipeline.ClusterKindClause:
		return "a clause of " + o.clusterRuleName(c.Object())
	case pipeline.ClusterKindBypass:
		return "cluster policy bypass (established, the node's own traffic, SCTP replies: on to NetworkPolicy)"
	}
	return fmt.Sprintf("ClusterNetworkPolicy flow %s", c)
}

func (o cookieOwners) clusterRuleName(obj uint32) string {
	if name, ok := o.rules.name(obj); ok {
		return name
	}
	return fmt.Sprintf("ClusterNetworkPolicy rule %#x (no current ClusterNetworkPolicy rule has this ID hash)", obj)
}
