// The manifests in dist/ against a real kube-apiserver: every object is accepted, and the
// RBAC grants the service accounts exactly what the binaries use (checked with a token of
// each account, both ways). Needs root (it starts a sandbox); runs under `make e2e`.
package dist_test

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kovs-net/kovs/test/e2e/framework"
)

// access is one `kubectl auth can-i` question and its required answer. A resource is
// "kind", "kind/name", or "kind:subresource".
type access struct {
	verb, resource string
	namespace      string // "" for cluster scope
	allowed        bool
}

func TestManifestsApplyAndRBACIsExact(t *testing.T) {
	env := framework.Require(t)
	s := framework.Up(t, env, "--nodes", "2", "--network", "none")
	dist, err := filepath.Abs("../../../dist")
	if err != nil {
		t.Fatal(err)
	}
	out, err := s.Kubectl("apply", "--server-side", "--field-manager=kovs-e2e", "-k", dist)
	if err != nil {
		t.Fatalf("kubectl apply -k dist: %v\n%s", err, out)
	}
	for _, want := range []string{"serviceaccount/kovs-controller", "serviceaccount/kovs-agent", "clusterrole.rbac.authorization.k8s.io/kovs-controller",
		"configmap/kovs-config", "deployment.apps/kovs-controller", "daemonset.apps/kovs-agent", "daemonset.apps/kovs-ovs", "service/kovs-controller",
		"validatingadmissionpolicy.admissionregistration.k8s.io/kovs-annotations",
		"validatingadmissionpolicybinding.admissionregistration.k8s.io/kovs-annotations",
		"validatingadmissionpolicy.admissionregistration.k8s.io/kovs-agent-node",
		"validatingadmissionpolicybinding.admissionregistration.k8s.io/kovs-agent-node",
		"customresourcedefinition.apiextensions.k8s.io/clusternetworkpolicies.policy.networking.k8s.io"} {
		if !strings.Contains(out, want) {
			t.Errorf("apply output lacks %s:\n%s", want, out)
		}
	}
	checks := map[string][]access{
		"kovs-controller": {
			{"list", "nodes", "", true}, {"watch", "nodes", "", true}, {"patch", "nodes", "", true}, {"patch", "nodes:status", "", true},
			{"list", "pods", "", true}, {"patch", "pods", "", true}, {"watch", "namespaces", "", true},
			{"list", "networkpolicies.networking.k8s.io", "", true}, {"patch", "networkpolicies.networking.k8s.io", "", true},
			{"create", "events", "default", true}, {"create", "tokenreviews.authentication.k8s.io", "", true},
			{"create", "leases.coordination.k8s.io", "kube-system", true}, {"update", "leases.coordination.k8s.io/kovs-controller", "kube-system", true},
			{"get", "secrets/kovs-controller-tls", "kube-system", true}, {"update", "configmaps/kovs-ca", "kube-system", true},
			{"list", "clusternetworkpolicies.policy.networking.k8s.io", "", true}, {"watch", "clusternetworkpolicies.policy.networking.k8s.io", "", true},
			{"update", "clusternetworkpolicies.policy.networking.k8s.io:status", "", true},
			// the agents' tokens verified locally: the issuer's keys, the agents' ServiceAccount
			{"get", "/openid/v1/jwks", "", true}, {"get", "/.well-known/openid-configuration", "", true},
			{"list", "serviceaccounts/kovs-agent", "kube-system", true}, {"watch", "serviceaccounts/kovs-agent", "kube-system", true},
			// and nothing more
			{"list", "serviceaccounts", "kube-system", false}, {"get", "serviceaccounts/kovs-agent", "kube-system", false},
			{"update", "clusternetworkpolicies.policy.networking.k8s.io", "", false}, {"create", "clusternetworkpolicies.policy.networking.k8s.io", "", false},
			{"patch", "clusternetworkpolicies.policy.networking.k8s.io:status", "", false},
			{"delete", "pods", "default", false}, {"update", "pods", "default", false}, {"delete", "nodes", "", false},
			{"get", "secrets", "kube-system", false}, {"get", "secrets/other", "kube-system", false}, {"list", "secrets", "", false},
			{"update", "leases.coordination.k8s.io/other", "kube-system", false}, {"create", "networkpolicies.networking.k8s.io", "default", false},
			{"create", "pods", "default", false}, {"update", "configmaps/other", "kube-system", false},
		},
		"kovs-agent": {
			{"list", "nodes", "", true}, {"watch", "nodes", "", true}, {"patch", "nodes:status", "", true},
			{"list", "pods", "", true}, {"watch", "pods", "", true}, {"get", "configmaps/kovs-ca", "kube-system", true},
			{"list", "services", "", true}, {"watch", "services", "", true},
			{"list", "endpointslices.discovery.k8s.io", "", true}, {"watch", "endpointslices.discovery.k8s.io", "", true},
			{"watch", "daemonsets.apps/kovs-agent", "kube-system", true}, {"list", "daemonsets.apps/kovs-agent", "kube-system", true},
			{"create", "events", "default", true},
			// the audit log's annotations (docs/audit.md)
			{"list", "namespaces", "", true}, {"watch", "namespaces", "", true},
			{"list", "clusternetworkpolicies.policy.networking.k8s.io", "", true},
			{"watch", "clusternetworkpolicies.policy.networking.k8s.io", "", true},
			// and nothing more
			{"watch", "daemonsets.apps", "kube-system", false}, {"list", "daemonsets.apps", "kube-system", false},
			{"watch", "daemonsets.apps/kube-proxy", "kube-system", false},
			{"watch", "daemonsets.apps", "default", false}, {"delete", "daemonsets.apps", "kube-system", false},
			{"update", "daemonsets.apps", "kube-system", false},
			{"update", "services", "default", false}, {"delete", "services", "default", false},
			{"create", "endpointslices.discovery.k8s.io", "default", false}, {"update", "endpointslices.discovery.k8s.io", "default", false},
			{"patch", "nodes", "", false}, {"patch", "pods", "default", false}, {"delete", "pods", "default", false},
			{"get", "configmaps/kovs-config", "kube-system", false}, {"get", "secrets/kovs-controller-tls", "kube-system", false},
			{"create", "tokenreviews.authentication.k8s.io", "", false}, {"list", "networkpolicies.networking.k8s.io", "", false},
			{"update", "clusternetworkpolicies.policy.networking.k8s.io", "", false},
			{"update", "clusternetworkpolicies.policy.networking.k8s.io:status", "", false},
			{"update", "namespaces", "", false},
		},
	}
	t.Run("admission", func(t *testing.T) { checkAdmission(t, s) })
	t.Run("the agent reads its own DaemonSet only", func(t *testing.T) { checkAgentDaemonSetRead(t, s) })
	for account, questions := range checks {
		token, err := s.Kubectl("create", "token", account, "-n", "kube-system")
		if err != nil {
			t.Fatalf("token for %s: %v: %s", account, err, token)
		}
		token = strings.TrimSpace(token)
		for _, q := range questions {
			resource, sub, hasSub := strings.Cut(q.resource, ":")
			args := []string{"--token", token, "auth", "can-i", q.verb, resource}
			if hasSub {
				args = append(args, "--subresource", sub)
			}
			if q.namespace != "" {
				args = append(args, "-n", q.namespace)
			}
			ans, _ := kubectlAs(s, args...)
			got := strings.TrimSpace(ans) == "yes"
			if got != q.allowed {
				t.Errorf("%s: can-i %s %s (ns %q) = %q, want allowed=%v", account, q.verb, q.resource, q.namespace, strings.TrimSpace(ans), q.allowed)
			}
		}
	}
}

// kubectlAs runs kubectl with the sandbox's server and CA but only the given token as the
// credential (the admin's client certificate is removed from a copy of the kubeconfig).
func kubectlAs(s *framework.Sandbox, args ...string) (string, error) {
	cmd := exec.Command(filepath.Join(s.K8sBinDir(), "kubectl"), append([]string{"--kubeconfig", s.TokenKubeconfig()}, args...)...)
	out, err := cmd.Output() // the answer only: kubectl warns about cluster-scoped kinds on stderr
	return string(out), err
}
