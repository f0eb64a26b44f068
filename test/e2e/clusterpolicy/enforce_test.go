package clusterpolicy_test

import (
	"context"
	"fmt"
	"net/netip"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/network-policy-api/apis/v1beta1"
	"sigs.k8s.io/network-policy-api/pkg/client/clientset/versioned"

	"github.com/kovs-net/kovs/go-controller/pkg/pipeline"
	"github.com/kovs-net/kovs/test/e2e/framework"
)

// testEnforcement runs on TestStatusConditions's sandbox (one node): the tiers in br-int,
// through kovs-controller's shares and the agent.
//
//	cnp-x/server  NetworkPolicy: ingress TCP 80 from anywhere (isolated)
//	cnp-w/open    no NetworkPolicy
//	e2e-admin     Admin 5, subject cnp-x/server: ingress Pass from cnp-z, then Deny from
//	              every namespace
//	e2e-baseline  Baseline 5, subject cnp-w: ingress Deny from cnp-y
//
// cnp-y/client -> server: the NetworkPolicy allows, the Admin Deny denies; cnp-z/client
// -> server: the Pass defers to the NetworkPolicy, which allows, past the Deny;
// cnp-y/client -> open: Baseline denies where no NetworkPolicy selects; cnp-z/client ->
// open: allowed. Every denial is shown by the packet counter of the rule's conj_id flow,
// which must grow with the probe (silence is no proof).
func testEnforcement(t *testing.T, env framework.Env, s *framework.Sandbox, client versioned.Interface) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	for _, ns := range []string{"cnp-x", "cnp-y", "cnp-z", "cnp-w"} {
		s.EnsureNamespace(t, ns, nil)
	}
	s.CreatePod(t, framework.PodSpec{Namespace: "cnp-x", Name: "server", Node: "node1", Labels: map[string]string{"app": "server"}})
	s.CreatePod(t, framework.PodSpec{Namespace: "cnp-w", Name: "open", Node: "node1"})
	s.CreatePod(t, framework.PodSpec{Namespace: "cnp-y", Name: "client", Node: "node1"})
	s.CreatePod(t, framework.PodSpec{Namespace: "cnp-z", Name: "client", Node: "node1"})
	server := s.WaitRunning(t, "cnp-x", "server", time.Minute)
	open := s.WaitRunning(t, "cnp-w", "open", time.Minute)
	clientY := s.WaitRunning(t, "cnp-y", "client", time.Minute)
	clientZ := s.WaitRunning(t, "cnp-z", "client", time.Minute)
	serverIP, openIP := framework.PodIPs(server)[0], framework.PodIPs(open)[0]

	port80 := intstr.FromInt32(80)
	tcp := corev1.ProtocolTCP
	np := &networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: "cnp-x", Name: "server-80"},
		Spec: networkingv1.NetworkPolicySpec{PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{"app": "server"}},
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress},
			Ingress:     []networkingv1.NetworkPolicyIngressRule{{Ports: []networkingv1.NetworkPolicyPort{{Protocol: &tcp, Port: &port80}}}}}}
	if _, err := s.Client.NetworkingV1().NetworkPolicies("cnp-x").Create(ctx, np, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	addrs := map[string]netip.Addr{"server": serverIP, "open": openIP}
	connects := func(from *corev1.Pod, to string) error {
		if r := s.Probe(from, addrs[to], "80/tcp", 2*time.Second); !r.Connected {
			return fmt.Errorf("%s/%s -> %s (%s): %s", from.Namespace, from.Name, to, addrs[to], framework.Describe(r))
		}
		return nil
	}
	// Before the cluster policies: all four connect (the NetworkPolicy allows TCP 80).
	framework.Eventually(t, 30*time.Second, "every probe connects before the cluster policies", func() error {
		for _, c := range []struct {
			from *corev1.Pod
			to   string
		}{{clientY, "server"}, {clientZ, "server"}, {clientY, "open"}, {clientZ, "open"}} {
			if err := connects(c.from, c.to); err != nil {
				return err
			}
		}
		return nil
	})

	ns := func(name string) *metav1.LabelSelector {
		return &metav1.LabelSelector{MatchLabels: map[string]string{"kubernetes.io/metadata.name": name}}
	}
	admin := &v1beta1.ClusterNetworkPolicy{ObjectMeta: metav1.ObjectMeta{Name: "e2e-admin"}, Spec: v1beta1.ClusterNetworkPolicySpec{
		Tier: v1beta1.AdminTier, Priority: 5,
		Subject: v1beta1.ClusterNetworkPolicySubject{Pods: &v1beta1.NamespacedPod{NamespaceSelector: *ns("cnp-x"),
			PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{"app": "server"}}}},
		Ingress: []v1beta1.ClusterNetworkPolicyIngressRule{
			{Name: "pass-z", Action: v1beta1.ClusterNetworkPolicyRuleActionPass, From: []v1beta1.ClusterNetworkPolicyIngressPeer{{Namespaces: ns("cnp-z")}}},
			{Name: "deny-all", Action: v1beta1.ClusterNetworkPolicyRuleActionDeny, From: []v1beta1.ClusterNetworkPolicyIngressPeer{{Namespaces: &metav1.LabelSelector{}}}},
		}}}
	baseline := &v1beta1.ClusterNetworkPolicy{ObjectMeta: metav1.ObjectMeta{Name: "e2e-baseline"}, Spec: v1beta1.ClusterNetworkPolicySpec{
		Tier: v1beta1.BaselineTier, Priority: 5, Subject: v1beta1.ClusterNetworkPolicySubject{Namespaces: ns("cnp-w")},
		Ingress: []v1beta1.ClusterNetworkPolicyIngressRule{
			{Name: "deny-y", Action: v1beta1.ClusterNetworkPolicyRuleActionDeny, From: []v1beta1.ClusterNetworkPolicyIngressPeer{{Namespaces: ns("cnp-y")}}},
		}}}
	for _, p := range []*v1beta1.ClusterNetworkPolicy{admin, baseline} {
		if _, err := client.PolicyV1beta1().ClusterNetworkPolicies().Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatalf("create %s: %v", p.Name, err)
		}
		defer func() {
			_ = client.PolicyV1beta1().ClusterNetworkPolicies().Delete(context.Background(), p.Name, metav1.DeleteOptions{})
		}()
	}

	// deniedBy probes and wants no connection and the rule's conj_id flow (the first
	// rule of its table on the node: priority 60000 minus its place) to count it.
	deniedBy := func(from *corev1.Pod, to string, table pipeline.Table, place int) func() error {
		return func() error {
			prio := 60000 - place
			var before uint64
			for _, f := range s.DumpFlows(t, "node1") {
				if f.Table == int(table.ID) && f.Priority == prio && containsConjID(f.Text) {
					before += f.Packets
				}
			}
			err := connects(from, to)
			if err == nil {
				return fmt.Errorf("%s/%s -> %s connects", from.Namespace, from.Name, to)
			}
			after := uint64(0)
			found := false
			for _, f := range s.DumpFlows(t, "node1") {
				if f.Table == int(table.ID) && f.Priority == prio && containsConjID(f.Text) {
					after += f.Packets
					found = true
				}
			}
			if !found || after <= before {
				return fmt.Errorf("%s/%s -> %s does not connect, but %s's rule at priority %d did not count it (%d -> %d packets, flow there: %v)",
					from.Namespace, from.Name, to, table.Name, prio, before, after, found)
			}
			return nil
		}
	}
	// Both are programmed on the one node with pods they select.
	programmed(t, ctx, client, "e2e-admin", "enforced on 1/1 nodes")
	programmed(t, ctx, client, "e2e-baseline", "enforced on 1/1 nodes")
	framework.Eventually(t, 60*time.Second, "the Admin Deny overrides the NetworkPolicy that allows cnp-y/client -> server",
		deniedBy(clientY, "server", pipeline.AdminIngressPolicy, 1))
	framework.Eventually(t, 30*time.Second, "the Pass defers cnp-z/client -> server to the NetworkPolicy, past the Deny",
		func() error { return connects(clientZ, "server") })
	framework.Eventually(t, 30*time.Second, "Baseline denies cnp-y/client -> open, which no NetworkPolicy selects",
		deniedBy(clientY, "open", pipeline.BaselineIngressPolicy, 0))
	if err := connects(clientZ, "open"); err != nil {
		t.Errorf("Baseline's peers are cnp-y only: %v", err)
	}

	// kovsctl trace names the table and the rule that decided.
	for _, tc := range []struct{ src, dst, want string }{
		{"cnp-y/client", "cnp-x/server", `DROPPED on node1 in table 65 AdminIngressPolicy by ClusterNetworkPolicy e2e-admin (Admin 5) ingress rule 1 "deny-all" (Deny)`},
		{"cnp-z/client", "cnp-x/server", `ClusterNetworkPolicy e2e-admin (Admin 5) ingress rule 0 "pass-z" (Pass) on node1`},
		{"cnp-y/client", "cnp-w/open", `DROPPED on node1 in table 75 BaselineIngressPolicy by ClusterNetworkPolicy e2e-baseline (Baseline 5) ingress rule 0 "deny-y" (Deny)`},
	} {
		out, err := exec.Command(filepath.Join(env.BinDir, "kovsctl"), "--kubeconfig", s.Layout.Kubeconfig(),
			"--ovs-dir", strings.ReplaceAll(s.Layout.OVSDir("NODE"), "NODE", "{node}"), "trace", tc.src, tc.dst, "--port", "80").CombinedOutput()
		if err != nil || !strings.Contains(string(out), tc.want) {
			t.Errorf("kovsctl trace %s %s (%v) does not say %q:\n%s", tc.src, tc.dst, err, tc.want, out)
		}
	}
}

func containsConjID(text string) bool { return strings.Contains(text, "conj_id=") }
