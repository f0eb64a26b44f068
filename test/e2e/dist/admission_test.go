package dist_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	authnv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/kovs-net/kovs/go-controller/pkg/controller/ipam"
	"github.com/kovs-net/kovs/test/e2e/framework"
)

// checkAdmission: dist/'s admission policies (issue 14), with the identities the attacks
// would use. A compromised node1 (its kovs-agent's token, bound to node1 as a DaemonSet
// pod's is) may set its own NetworkUnavailable condition and nothing else: not node2's,
// not node1's addresses, labels, annotations or other conditions. node1's kubelet may not
// rewrite node1's kovs.io/node-subnets; no one but kovs-controller (not even the admin
// these tests run as) may create a pod carrying kovs.io/pod-network. kovs-controller may
// write both.
func checkAdmission(t *testing.T, s *framework.Sandbox) {
	ctx := context.Background()
	agent := s.TokenClient(t, agentToken(t, s, "node1"))
	waitPolicies(t, s, agent)
	condition := func(status corev1.ConditionStatus) map[string]any {
		return map[string]any{"status": map[string]any{"conditions": []corev1.NodeCondition{{
			Type: corev1.NodeNetworkUnavailable, Status: status, Reason: "KovsE2E", Message: "admission test",
			LastTransitionTime: metav1.Now(), LastHeartbeatTime: metav1.Now()}}}}
	}
	patchStatus := func(c kubernetes.Interface, node string, patch map[string]any) error {
		b, _ := json.Marshal(patch)
		_, err := c.CoreV1().Nodes().Patch(ctx, node, types.StrategicMergePatchType, b, metav1.PatchOptions{}, "status")
		return err
	}
	if err := patchStatus(agent, "node1", condition(corev1.ConditionTrue)); err != nil {
		t.Errorf("node1's agent may not set node1's NetworkUnavailable: %v", err)
	}
	mustRefuse(t, "node1's agent patches node2's NetworkUnavailable", patchStatus(agent, "node2", condition(corev1.ConditionFalse)))
	annotate := map[string]any{"metadata": map[string]any{"annotations": map[string]string{ipam.NodeSubnetsAnnotationKey: `{"ipv4":"10.244.9.0/24"}`}}}
	mustRefuse(t, "node1's agent rewrites node2's subnets through nodes/status", patchStatus(agent, "node2", annotate))
	mustRefuse(t, "node1's agent rewrites its own subnets through nodes/status", patchStatus(agent, "node1", annotate))
	mustRefuse(t, "node1's agent labels its node", patchStatus(agent, "node1",
		map[string]any{"metadata": map[string]any{"labels": map[string]string{"kovs-e2e": "x"}}}))
	mustRefuse(t, "node1's agent changes its node's addresses", patchStatus(agent, "node1",
		map[string]any{"status": map[string]any{"addresses": []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "192.0.2.1"}}}}))
	mustRefuse(t, "node1's agent sets node1's Ready condition", patchStatus(agent, "node1", map[string]any{"status": map[string]any{
		"conditions": []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionFalse, Reason: "KovsE2E",
			LastTransitionTime: metav1.Now(), LastHeartbeatTime: metav1.Now()}}}}))

	kubelet := s.ClientAs(t, "system:node:node1", "system:nodes")
	b, _ := json.Marshal(annotate)
	_, err := kubelet.CoreV1().Nodes().Patch(ctx, "node1", types.MergePatchType, b, metav1.PatchOptions{})
	mustRefuse(t, "node1's kubelet rewrites node1's subnets", err)
	forgedAddresses, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{
		ipam.NodeAddressesAnnotationKey: `{"addresses":["192.0.2.1"]}`}}})
	_, err = kubelet.CoreV1().Nodes().Patch(ctx, "node1", types.MergePatchType, forgedAddresses, metav1.PatchOptions{})
	mustRefuse(t, "node1's kubelet rewrites node1's recorded tunnel addresses", err)

	controller := s.ClientAs(t, framework.ControllerUser, "system:serviceaccounts", "system:serviceaccounts:kube-system")
	if _, err := controller.CoreV1().Nodes().Patch(ctx, "node1", types.MergePatchType, b, metav1.PatchOptions{}); err != nil {
		t.Errorf("kovs-controller may not record node1's subnets: %v", err)
	}
	checkRealizationRecord(t, s, controller)
}

// checkRealizationRecord: a NetworkPolicy's kovs.io/realization is kovs-controller's to
// write; the policy's owner may not forge it, but may replace the policy without it (as
// kubectl replace and GitOps tools do), which the controller then writes again.
func checkRealizationRecord(t *testing.T, s *framework.Sandbox, controller kubernetes.Interface) {
	ctx := context.Background()
	const key = "kovs.io/realization"
	np := &networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "admission-realization"},
		Spec: networkingv1.NetworkPolicySpec{PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress}}}
	forged := np.DeepCopy()
	forged.Annotations = map[string]string{key: `{"nodes":0}`}
	_, err := s.Client.NetworkingV1().NetworkPolicies("default").Create(ctx, forged, metav1.CreateOptions{})
	mustRefuse(t, "the admin creates a NetworkPolicy carrying "+key, err)
	if _, err := s.Client.NetworkingV1().NetworkPolicies("default").Create(ctx, np, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	defer func() {
		_ = s.Client.NetworkingV1().NetworkPolicies("default").Delete(ctx, np.Name, metav1.DeleteOptions{})
	}()
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{key: `{"nodes":3}`}}})
	if _, err := controller.NetworkingV1().NetworkPolicies("default").Patch(ctx, np.Name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatalf("kovs-controller may not record a policy's realization: %v", err)
	}
	_, err = s.Client.NetworkingV1().NetworkPolicies("default").Patch(ctx, np.Name, types.MergePatchType,
		[]byte(`{"metadata":{"annotations":{"kovs.io/realization":"{\"nodes\":9}"}}}`), metav1.PatchOptions{})
	mustRefuse(t, "the admin changes a NetworkPolicy's "+key, err)
	cur, err := s.Client.NetworkingV1().NetworkPolicies("default").Get(ctx, np.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	replace := np.DeepCopy()
	replace.ResourceVersion = cur.ResourceVersion
	if _, err := s.Client.NetworkingV1().NetworkPolicies("default").Update(ctx, replace, metav1.UpdateOptions{}); err != nil {
		t.Errorf("the admin replaces a NetworkPolicy without %s (kubectl replace): %v", key, err)
	}
}

func mustRefuse(t *testing.T, what string, err error) {
	t.Helper()
	if err == nil {
		t.Errorf("%s: allowed", what)
		return
	}
	if !(apierrors.IsForbidden(err) || apierrors.IsInvalid(err)) || !strings.Contains(err.Error(), "ValidatingAdmissionPolicy") {
		t.Errorf("%s: want a refusal by one of kovs's admission policies, got: %v", what, err)
	}
}

// agentToken is a token of kovs-agent bound to the Node (its user info names the node,
// as a DaemonSet pod's projected token does), for kube-apiserver.
func agentToken(t *testing.T, s *framework.Sandbox, node string) string {
	ctx := context.Background()
	n, err := s.Client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	tr, err := s.Client.CoreV1().ServiceAccounts("kube-system").CreateToken(ctx, "kovs-agent", &authnv1.TokenRequest{
		Spec: authnv1.TokenRequestSpec{BoundObjectRef: &authnv1.BoundObjectReference{Kind: "Node", APIVersion: "v1", Name: n.Name, UID: n.UID}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return tr.Status.Token
}

// waitPolicies waits until kube-apiserver enforces each of dist/'s admission policies
// (their bindings are watched, not read on apply): a dry-run write that only that policy
// refuses must be refused by it, by name. Any other error (RBAC, a missing object, an
// apiserver not ready) is not a sign of the policy and keeps the test waiting; not in force
// within 20 s fails the test.
func waitPolicies(t *testing.T, s *framework.Sandbox, agent kubernetes.Interface) {
	ctx := context.Background()
	dryRun := []string{metav1.DryRunAll}
	probe := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "policy-probe",
		Annotations: map[string]string{ipam.NodeSubnetsAnnotationKey: "{}"}}}
	framework.Eventually(t, 20*time.Second, "kovs-annotations in force (a node created with "+ipam.NodeSubnetsAnnotationKey+" refused by it)", func() error {
		_, err := s.Client.CoreV1().Nodes().Create(ctx, probe, metav1.CreateOptions{DryRun: dryRun})
		return refusedBy(err, "kovs-annotations")
	})
	condition, _ := json.Marshal(map[string]any{"status": map[string]any{"conditions": []corev1.NodeCondition{{
		Type: corev1.NodeNetworkUnavailable, Status: corev1.ConditionFalse, Reason: "KovsE2E",
		LastTransitionTime: metav1.Now(), LastHeartbeatTime: metav1.Now()}}}})
	framework.Eventually(t, 20*time.Second, "kovs-agent-node in force (node1's agent refused node2's condition by it)", func() error {
		_, err := agent.CoreV1().Nodes().Patch(ctx, "node2", types.StrategicMergePatchType, condition, metav1.PatchOptions{DryRun: dryRun}, "status")
		return refusedBy(err, "kovs-agent-node")
	})
}

// refusedBy returns nil when err is a refusal by the ValidatingAdmissionPolicy named
// policy, and otherwise says what err was instead.
func refusedBy(err error, policy string) error {
	switch {
	case err == nil:
		return fmt.Errorf("the write was allowed")
	case !apierrors.IsForbidden(err) && !apierrors.IsInvalid(err):
		return fmt.Errorf("not an admission refusal: %w", err)
	case !strings.Contains(err.Error(), "ValidatingAdmissionPolicy '"+policy+"'"):
		return fmt.Errorf("refused, but not by %s: %w", policy, err)
	}
	return nil
}

// checkAgentDaemonSetRead: with its token, an agent lists and watches its own DaemonSet the
// way it does (a metadata.name field selector, pkg/agent/uninstall.go), and no other.
func checkAgentDaemonSetRead(t *testing.T, s *framework.Sandbox) {
	ctx := context.Background()
	agent := s.TokenClient(t, agentToken(t, s, "node1"))
	byName := func(name string) metav1.ListOptions {
		return metav1.ListOptions{FieldSelector: "metadata.name=" + name}
	}
	if _, err := agent.AppsV1().DaemonSets("kube-system").List(ctx, byName("kovs-agent")); err != nil {
		t.Errorf("the agent may not list its DaemonSet by name: %v", err)
	}
	w, err := agent.AppsV1().DaemonSets("kube-system").Watch(ctx, byName("kovs-agent"))
	if err != nil {
		t.Errorf("the agent may not watch its DaemonSet by name: %v", err)
	} else {
		w.Stop()
	}
	for what, opts := range map[string]metav1.ListOptions{"every DaemonSet of kube-system": {}, "kube-proxy's": byName("kube-proxy")} {
		if _, err := agent.AppsV1().DaemonSets("kube-system").List(ctx, opts); !apierrors.IsForbidden(err) {
			t.Errorf("the agent lists %s: %v, want forbidden", what, err)
		}
	}
}
