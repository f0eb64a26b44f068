package kovsctl

import (
	"context"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/network-policy-api/apis/v1beta1"
	"sigs.k8s.io/network-policy-api/pkg/client/clientset/versioned/fake"

	"github.com/kovs-net/kovs/go-controller/pkg/pipeline"
)

// TestDescribeClusterPolicyCookies: a trace names the ClusterNetworkPolicy rule of a
// cluster policy flow's cookie, from the API objects, with its tier, priority, name and
// action.
func TestDescribeClusterPolicyCookies(t *testing.T) {
	cnp := &v1beta1.ClusterNetworkPolicy{ObjectMeta: metav1.ObjectMeta{Name: "tenants"}, Spec: v1beta1.ClusterNetworkPolicySpec{
		Tier: v1beta1.AdminTier, Priority: 10,
		Ingress: []v1beta1.ClusterNetworkPolicyIngressRule{{Name: "pass-z", Action: v1beta1.ClusterNetworkPolicyRuleActionPass},
			{Action: v1beta1.ClusterNetworkPolicyRuleActionDeny}},
		Egress: []v1beta1.ClusterNetworkPolicyEgressRule{{Name: "web", Action: v1beta1.ClusterNetworkPolicyRuleActionAccept,
			Protocols: []v1beta1.ClusterNetworkPolicyProtocol{{DestinationNamedPort: "http"}}}},
	}}
	rules := policyRules{}
	if err := (Access{PolicyAPI: fake.NewSimpleClientset(cnp)}).listClusterRules(context.Background(), rules, "tcp", 8080); err != nil {
		t.Fatal(err)
	}
	owners := cookieOwners{rules: rules}
	for _, tc := range []struct {
		cookie pipeline.Cookie
		want   string
	}{
		{pipeline.NewClusterPolicyCookie(1, pipeline.ClusterKindRule, pipeline.PolicyRuleObjectID("tenants/ingress/0")),
			`ClusterNetworkPolicy tenants (Admin 10) ingress rule 0 "pass-z" (Pass)`},
		{pipeline.NewClusterPolicyCookie(1, pipeline.ClusterKindRule, pipeline.PolicyRuleObjectID("tenants/ingress/1")),
			`ClusterNetworkPolicy tenants (Admin 10) ingress rule 1 (Deny)`},
		{pipeline.NewClusterPolicyCookie(1, pipeline.ClusterKindClause, pipeline.PolicyRuleObjectID("tenants/ingress/1")),
			`a clause of ClusterNetworkPolicy tenants (Admin 10) ingress rule 1 (Deny)`},
		{pipeline.NewClusterPolicyCookie(1, pipeline.ClusterKindRule, pipeline.PolicyRuleObjectID("tenants/egress/0/tcp-8080")),
			`ClusterNetworkPolicy tenants (Admin 10) egress rule 0 "web" (Accept) (port "http" = tcp/8080)`},
		{pipeline.NewClusterPolicyCookie(1, pipeline.ClusterKindRule, 7),
			"ClusterNetworkPolicy rule 0x7 (no current ClusterNetworkPolicy rule has this ID hash)"},
	} {
		if got := owners.describe(tc.cookie, nil); got != tc.want {
			t.Errorf("describe(%s) = %q, want %q", tc.cookie, got, tc.want)
		}
	}
}
