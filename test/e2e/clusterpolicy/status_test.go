// ClusterNetworkPolicy against a real sandbox: dist/ installs the CRD, kovs-controller
// (under dist/'s RBAC) writes every policy's status conditions and an Event for what it
// cannot enforce as written, and kovsctl policies shows them. Needs root (it starts a sandbox); runs under `make e2e`.
package clusterpolicy_test

import (
	"context"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/network-policy-api/apis/v1beta1"
	"sigs.k8s.io/network-policy-api/pkg/client/clientset/versioned"

	"github.com/kovs-net/kovs/go-controller/pkg/controller/clusterpolicy"
	"github.com/kovs-net/kovs/test/e2e/framework"
)

func TestStatusConditions(t *testing.T) {
	env := framework.Require(t)
	s := framework.Up(t, env, "--nodes", "1")
	cfg, err := clientcmd.BuildConfigFromFlags("", s.Layout.Kubeconfig())
	if err != nil {
		t.Fatal(err)
	}
	client, err := versioned.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	subject := v1beta1.ClusterNetworkPolicySubject{Namespaces: &metav1.LabelSelector{MatchLabels: map[string]string{"tenant": "a"}}}
	exact := &v1beta1.ClusterNetworkPolicy{ObjectMeta: metav1.ObjectMeta{Name: "exact"}, Spec: v1beta1.ClusterNetworkPolicySpec{
		Tier: v1beta1.AdminTier, Priority: 10, Subject: subject,
		Ingress: []v1beta1.ClusterNetworkPolicyIngressRule{{Name: "no-b", Action: v1beta1.ClusterNetworkPolicyRuleActionDeny,
			From: []v1beta1.ClusterNetworkPolicyIngressPeer{{Namespaces: &metav1.LabelSelector{MatchLabels: map[string]string{"tenant": "b"}}}}}},
	}}
	// The API server does not check label selector operators in a CRD; kovs does.
	unreadable := exact.DeepCopy()
	unreadable.Name = "unreadable"
	unreadable.Spec.Ingress[0].From[0].Namespaces = &metav1.LabelSelector{
		MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "tenant", Operator: "Near", Values: []string{"b"}}}}
	for _, p := range []*v1beta1.ClusterNetworkPolicy{exact, unreadable} {
		if _, err := client.PolicyV1beta1().ClusterNetworkPolicies().Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatalf("create %s: %v", p.Name, err)
		}
	}
	supported := func(name string) (*metav1.Condition, *metav1.Condition) {
		var sup, prog *metav1.Condition
		err := wait.PollUntilContextCancel(ctx, 100*time.Millisecond, true, func(ctx context.Context) (bool, error) {
			p, err := client.PolicyV1beta1().ClusterNetworkPolicies().Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return false, err
			}
			sup = meta.FindStatusCondition(p.Status.Conditions, clusterpolicy.ConditionSupported)
			prog = meta.FindStatusCondition(p.Status.Conditions, clusterpolicy.ConditionProgrammed)
			return sup != nil && prog != nil, nil
		})
		if err != nil {
			t.Fatalf("%s: kovs-controller wrote no %s and %s conditions: %v", name, clusterpolicy.ConditionSupported, clusterpolicy.ConditionProgrammed, err)
		}
		return sup, prog
	}
	sup, _ := supported("exact")
	if sup.Status != metav1.ConditionTrue {
		t.Errorf("exact: supported %+v", sup)
	}
	// exact selects no pod: once compiled, it is programmed, with nothing to enforce.
	programmed(t, ctx, client, "exact", "selects no pod")
	sup, _ = supported("unreadable")
	if sup.Status != metav1.ConditionFalse || sup.Reason != clusterpolicy.ReasonPartlyUnsupported || !strings.Contains(sup.Message, "not a valid label selector") {
		t.Errorf("unreadable: supported %+v", sup)
	}
	err = wait.PollUntilContextCancel(ctx, 100*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		events, err := s.Client.CoreV1().Events("default").List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=unreadable"})
		if err != nil {
			return false, err
		}
		for _, e := range events.Items {
			if e.Reason == clusterpolicy.ReasonPartlyUnsupported && strings.Contains(e.Message, "not a valid label selector") {
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Errorf("no %s Event for the unreadable policy: %v", clusterpolicy.ReasonPartlyUnsupported, err)
	}
	// kovsctl policies shows both, with the conditions.
	out, err := exec.Command(filepath.Join(env.BinDir, "kovsctl"), "--kubeconfig", s.Layout.Kubeconfig(), "policies").CombinedOutput()
	if err != nil {
		t.Fatalf("kovsctl policies: %v\n%s", err, out)
	}
	for _, want := range []string{"exact", "unreadable", "yes: selects no pod", "no: ingress[0]"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("kovsctl policies does not say %q:\n%s", want, out)
		}
	}
	t.Run("Enforcement", func(t *testing.T) { testEnforcement(t, env, s, client) })
	t.Run("AuditLog", func(t *testing.T) { testAuditLog(t, env, s, client) })
	// Last: it restarts kovs-controller with a slow cluster feed.
	t.Run("NewPodClosedUntilClusterRules", func(t *testing.T) { testNewPodClosedUntilClusterRules(t, s, client) })
}

// programmed waits until the policy's Programmed condition is True with a message that
// contains want.
func programmed(t *testing.T, ctx context.Context, client versioned.Interface, name, want string) {
	t.Helper()
	var prog *metav1.Condition
	err := wait.PollUntilContextCancel(ctx, 100*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		p, err := client.PolicyV1beta1().ClusterNetworkPolicies().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		prog = meta.FindStatusCondition(p.Status.Conditions, clusterpolicy.ConditionProgrammed)
		return prog != nil && prog.Status == metav1.ConditionTrue && prog.ObservedGeneration == p.Generation &&
			strings.Contains(prog.Message, want), nil
	})
	if err != nil {
		t.Fatalf("%s: not %s True (%q): last %+v: %v", name, clusterpolicy.ConditionProgrammed, want, prog, err)
	}
}
