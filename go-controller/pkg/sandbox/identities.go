package sandbox

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"

	authnv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// The manifests of dist/ the emulated nodes' kovs runs under: its ServiceAccounts and
// their RBAC, and the admission policies (docs/security.md).
var identityManifests = []string{"rbac.yaml", "admission.yaml"}

const controllerServiceAccount = "kovs-controller"

// ControllerKubeconfig is kovs-controller's kubeconfig: its ServiceAccount's token.
func (l Layout) ControllerKubeconfig() string {
	return filepath.Join(l.Dir(), "kovs-controller.kubeconfig")
}

// AgentKubeconfig is the kubeconfig of node's kovs-agent: a token of the agents'
// ServiceAccount bound to the node's Node.
func (l Layout) AgentKubeconfig(node string) string {
	return filepath.Join(l.NodeDir(node), "kovs-agent.kubeconfig")
}

// kovsIdentities applies dist/'s RBAC and admission policies and writes the kubeconfigs
// kovs-controller and every kovs-agent run with: tokens of their ServiceAccounts, the
// agents' bound to their Nodes as a DaemonSet pod's projected token names its node. The
// emulated nodes thus run kovs with exactly the rights dist/ gives it, under its policies.
func (u *upRun) kovsIdentities() error {
	args := []string{"apply", "--server-side", "--field-manager=kovs-sandbox"}
	for _, m := range identityManifests {
		path := filepath.Join(u.opts.DistDir, m)
		if _, err := os.Stat(path); err != nil {
			return fmt.Errorf("kovs runs under dist/'s RBAC and admission policies: %w (set --dist to the repository's dist/)", err)
		}
		args = append(args, "-f", path)
	}
	if out, err := u.kubectl(args...); err != nil {
		return fmt.Errorf("kubectl apply dist/ identities: %w\n%s", err, out)
	}
	client, err := u.layout.Client()
	if err != nil {
		return err
	}
	lifetime := int64(agentTokenLifetime)
	ctx := u.ctx
	tr, err := client.CoreV1().ServiceAccounts(agentNamespace).CreateToken(ctx, controllerServiceAccount,
		&authnv1.TokenRequest{Spec: authnv1.TokenRequestSpec{ExpirationSeconds: &lifetime}}, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("token of %s/%s: %w", agentNamespace, controllerServiceAccount, err)
	}
	server := "https://127.0.0.1:" + strconv.Itoa(u.state.APIServerPort)
	if err := writeTokenKubeconfig(u.layout.ControllerKubeconfig(), server, u.layout.PKIDir(), controllerServiceAccount, tr.Status.Token); err != nil {
		return err
	}
	for _, n := range u.state.Nodes {
		node, err := client.CoreV1().Nodes().Get(ctx, n.Name, metav1.GetOptions{})
		if err != nil {
			return fmt.Errorf("node %s: %w", n.Name, err)
		}
		tr, err := client.CoreV1().ServiceAccounts(agentNamespace).CreateToken(ctx, agentServiceAccount, &authnv1.TokenRequest{
			Spec: authnv1.TokenRequestSpec{ExpirationSeconds: &lifetime,
				BoundObjectRef: &authnv1.BoundObjectReference{Kind: "Node", APIVersion: "v1", Name: node.Name, UID: node.UID}},
		}, metav1.CreateOptions{})
		if err != nil {
			return fmt.Errorf("token of %s/%s bound to node %s: %w", agentNamespace, agentServiceAccount, n.Name, err)
		}
		nodeServer := "https://127.0.0.1:" + strconv.Itoa(NodeAPIServerPort)
		if err := writeTokenKubeconfig(u.layout.AgentKubeconfig(n.Name), nodeServer, u.layout.PKIDir(), agentServiceAccount, tr.Status.Token); err != nil {
			return err
		}
	}
	return nil
}

// writeTokenKubeconfig writes a kubeconfig for server with the sandbox's CA and a bearer
// token.
func writeTokenKubeconfig(path, server, pki, user, token string) error {
	ca, err := os.ReadFile(filepath.Join(pki, caCert))
	if err != nil {
		return err
	}
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["kovs-sandbox"] = &clientcmdapi.Cluster{Server: server, CertificateAuthorityData: ca}
	cfg.AuthInfos[user] = &clientcmdapi.AuthInfo{Token: token}
	cfg.Contexts["kovs-sandbox"] = &clientcmdapi.Context{Cluster: "kovs-sandbox", AuthInfo: user}
	cfg.CurrentContext = "kovs-sandbox"
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		return fmt.Errorf("write kubeconfig %s: %w", path, err)
	}
	return nil
}
