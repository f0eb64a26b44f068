package clusterpolicy

import (
	"fmt"
	"net/netip"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/network-policy-api/apis/v1beta1"
)

// Check returns what kovs cannot enforce as written in a policy the API server accepted,
// each as a sentence that says what kovs does instead and what to fix; none when kovs
// enforces the policy exactly.
func Check(cnp *v1beta1.ClusterNetworkPolicy) []string {
	var problems []string
	add := func(format string, args ...any) { problems = append(problems, fmt.Sprintf(format, args...)) }
	s := &cnp.Spec.Subject
	if s.Namespaces != nil {
		if _, err := metav1.LabelSelectorAsSelector(s.Namespaces); err != nil {
			add("subject.namespaces is not a valid label selector (%v): the policy selects no pod; fix the selector", err)
		}
	} else if s.Pods != nil {
		if err := checkSelectors(&s.Pods.NamespaceSelector, &s.Pods.PodSelector); err != nil {
			add("subject.pods is not a valid selector (%v): the policy selects no pod; fix the selector", err)
		}
	} else {
		add("subject sets no field kovs knows (a newer CRD?): the policy selects no pod; set namespaces or pods")
	}
	for i, r := range cnp.Spec.Ingress {
		for j, p := range r.From {
			peer := v1beta1.ClusterNetworkPolicyEgressPeer{Namespaces: p.Namespaces, Pods: p.Pods}
			problems = append(problems, checkPeer(fmt.Sprintf("ingress[%d] (%q) from[%d]", i, r.Name, j), r.Action, &peer)...)
		}
	}
	for i, r := range cnp.Spec.Egress {
		named := false
		for _, p := range r.Protocols {
			named = named || p.DestinationNamedPort != ""
		}
		for j := range r.To {
			where := fmt.Sprintf("egress[%d] (%q) to[%d]", i, r.Name, j)
			problems = append(problems, checkPeer(where, r.Action, &r.To[j])...)
			if named && (r.To[j].Networks != nil || r.To[j].Nodes != nil) {
				add("%s: networks and nodes have no named ports, so the rule's destinationNamedPort never matches them; use port numbers for them in a rule of their own", where)
			}
		}
	}
	return problems
}

func checkSelectors(nsSel, podSel *metav1.LabelSelector) error {
	if _, err := metav1.LabelSelectorAsSelector(nsSel); err != nil {
		return err
	}
	_, err := metav1.LabelSelectorAsSelector(podSel)
	return err
}

func checkPeer(where string, action v1beta1.ClusterNetworkPolicyRuleAction, p *v1beta1.ClusterNetworkPolicyEgressPeer) []string {
	failClosed := "the rule ignores this peer (an Accept rule fails closed by matching less)"
	if action != v1beta1.ClusterNetworkPolicyRuleActionAccept {
		failClosed = "the rule denies all traffic of its subject (a " + string(action) + " rule fails closed)"
	}
	switch {
	case p.Namespaces != nil:
		if _, err := metav1.LabelSelectorAsSelector(p.Namespaces); err != nil {
			return []string{fmt.Sprintf("%s: namespaces is not a valid label selector (%v): %s; fix the selector", where, err, failClosed)}
		}
	case p.Pods != nil:
		if err := checkSelectors(&p.Pods.NamespaceSelector, &p.Pods.PodSelector); err != nil {
			return []string{fmt.Sprintf("%s: pods is not a valid selector (%v): %s; fix the selector", where, err, failClosed)}
		}
	case p.Networks != nil:
		for _, n := range p.Networks {
			if pfx, err := netip.ParsePrefix(string(n)); err != nil || pfx != pfx.Masked() {
				return []string{fmt.Sprintf("%s: network %q is not a CIDR with its host bits zero: it is ignored; write it as %s", where, n, maskedOr(pfx, err))}
			}
		}
	case p.Nodes != nil:
		if _, err := metav1.LabelSelectorAsSelector(p.Nodes); err != nil {
			return []string{fmt.Sprintf("%s: nodes is not a valid label selector (%v): %s; fix the selector", where, err, failClosed)}
		}
	case p.DomainNames != nil:
		return []string{fmt.Sprintf("%s: kovs does not enforce domainNames peers: they match nothing, so the rule accepts less than written; use networks for the addresses the names resolve to", where)}
	default:
		return []string{fmt.Sprintf("%s: the peer sets no field kovs knows (a newer CRD?): %s; set one of namespaces, pods, networks, nodes", where, failClosed)}
	}
	return nil
}

func maskedOr(pfx netip.Prefix, err error) string {
	if err != nil {
		return "an address/length such as 10.0.0.0/8"
	}
	return pfx.Masked().String()
}
