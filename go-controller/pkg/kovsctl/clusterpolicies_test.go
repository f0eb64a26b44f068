package kovsctl

import (
	"bytes"
	"context"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/network-policy-api/apis/v1beta1"
	"sigs.k8s.io/network-policy-api/pkg/client/clientset/versioned/fake"

	"github.com/kovs-net/kovs/go-controller/pkg/controller/clusterpolicy"
)

func TestClusterPoliciesShowTheConditions(t *testing.T) {
	withStatus := &v1beta1.ClusterNetworkPolicy{ObjectMeta: metav1.ObjectMeta{Name: "a-tenants"},
		Spec: v1beta1.ClusterNetworkPolicySpec{Tier: v1beta1.AdminTier, Priority: 10},
		Status: v1beta1.ClusterNetworkPolicyStatus{Conditions: []metav1.Condition{
			{Type: clusterpolicy.ConditionProgrammed, Status: metav1.ConditionFalse, Reason: clusterpolicy.ReasonPending},
			{Type: clusterpolicy.ConditionSupported, Status: metav1.ConditionFalse, Reason: clusterpolicy.ReasonPartlyUnsupported, Message: "egress[0]: domainNames"},
		}}}
	fresh := &v1beta1.ClusterNetworkPolicy{ObjectMeta: metav1.ObjectMeta{Name: "b-default"},
		Spec: v1beta1.ClusterNetworkPolicySpec{Tier: v1beta1.BaselineTier, Priority: 1000}}
	var out bytes.Buffer
	if err := (Access{PolicyAPI: fake.NewSimpleClientset(fresh, withStatus)}).ClusterPolicies(context.Background(), &out); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 3 {
		t.Fatalf("want a header and two policies:\n%s", out.String())
	}
	for i, want := range [][]string{
		{"CLUSTER POLICY", "ENFORCED", "AS WRITTEN"},
		{"a-tenants", "Admin", "10", "no: Pending", "no: egress[0]: domainNames"},
		{"b-default", "Baseline", "1000", "unknown (no status from kovs-controller yet)"},
	} {
		for _, w := range want {
			if !strings.Contains(lines[i], w) {
				t.Errorf("line %d %q lacks %q", i, lines[i], w)
			}
		}
	}
}
