package clusterpolicy

import (
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/network-policy-api/apis/v1beta1"
)

func TestCheckSaysWhatToFix(t *testing.T) {
	exact := cnp("exact", admin, 1, "gryffindor")
	exact.Spec.Ingress = []v1beta1.ClusterNetworkPolicyIngressRule{ingress(deny, "slytherin", tcp(80))}
	if problems := Check(exact); len(problems) != 0 {
		t.Errorf("a policy kovs enforces exactly has problems: %q", problems)
	}
	cases := []struct {
		name string
		rule v1beta1.ClusterNetworkPolicyEgressRule
		want []string // substrings of the one problem
	}{
		{"domain names", v1beta1.ClusterNetworkPolicyEgressRule{Name: "dns", Action: accept,
			To: []v1beta1.ClusterNetworkPolicyEgressPeer{{DomainNames: []v1beta1.DomainName{"kubernetes.io"}}}},
			[]string{`egress[0] ("dns") to[0]`, "domainNames", "match nothing", "use networks"}},
		{"unknown peer in a deny rule", v1beta1.ClusterNetworkPolicyEgressRule{Action: deny, To: []v1beta1.ClusterNetworkPolicyEgressPeer{{}}},
			[]string{"no field kovs knows", "denies all traffic of its subject", "set one of"}},
		{"unknown peer in an accept rule", v1beta1.ClusterNetworkPolicyEgressRule{Action: accept, To: []v1beta1.ClusterNetworkPolicyEgressPeer{{}}},
			[]string{"no field kovs knows", "ignores this peer"}},
		{"bad selector", v1beta1.ClusterNetworkPolicyEgressRule{Action: deny, To: []v1beta1.ClusterNetworkPolicyEgressPeer{{Namespaces: &metav1.LabelSelector{
			MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "a", Operator: "Near"}}}}}},
			[]string{"not a valid label selector", "denies all traffic of its subject", "fix the selector"}},
		{"named port with networks", v1beta1.ClusterNetworkPolicyEgressRule{Action: deny,
			To:        []v1beta1.ClusterNetworkPolicyEgressPeer{{Networks: []v1beta1.CIDR{"10.0.0.0/8"}}},
			Protocols: []v1beta1.ClusterNetworkPolicyProtocol{{DestinationNamedPort: "web"}}},
			[]string{"have no named ports", "use port numbers"}},
		{"host bits", v1beta1.ClusterNetworkPolicyEgressRule{Action: deny,
			To: []v1beta1.ClusterNetworkPolicyEgressPeer{{Networks: []v1beta1.CIDR{"10.0.0.1/8"}}}},
			[]string{`"10.0.0.1/8"`, "write it as 10.0.0.0/8"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := cnp("p", admin, 1, "gryffindor")
			p.Spec.Egress = []v1beta1.ClusterNetworkPolicyEgressRule{tc.rule}
			problems := Check(p)
			if len(problems) != 1 {
				t.Fatalf("problems = %q, want one", problems)
			}
			for _, w := range tc.want {
				if !strings.Contains(problems[0], w) {
					t.Errorf("%q does not say %q", problems[0], w)
				}
			}
		})
	}
}
