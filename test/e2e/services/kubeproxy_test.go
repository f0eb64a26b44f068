package services_test

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/kovs-net/kovs/go-controller/pkg/sandbox"
	"github.com/kovs-net/kovs/test/e2e/framework"
)

// TestServicesKubeProxy proves `kovs-agent --service-proxy=none` beside the real upstream
// kube-proxy (nftables mode, one per node namespace: `kovs-sandbox up --kube-proxy`) on a
// two-node IPv4 sandbox: a pod on node1 reaches a ClusterIP whose backends are on node1
// and node2 through kube-proxy's DNAT on the host (docs/services.md, "Leaving Services to
// kube-proxy"), new connections spread over both backends and the backends see the
// client pod's own address; node2's host reaches node1's NodePort and the ClusterIP;
// br-int carries no Service flows or groups and the hosts no kovs-services table, while
// kube-proxy's table holds the Service; and NetworkPolicy on the backends still decides
// after kube-proxy's translation, by the client pod's identity.
func TestServicesKubeProxy(t *testing.T) {
	testServicesKubeProxy(t, "ipv4")
}

// TestServicesKubeProxyIPv6 proves the same on a two-node IPv6 sandbox.
func TestServicesKubeProxyIPv6(t *testing.T) {
	testServicesKubeProxy(t, "ipv6")
}

func testServicesKubeProxy(t *testing.T, family string) {
	env := framework.Require(t)
	s := framework.Up(t, env, "--nodes", "2", "--ip-family", family, "--kube-proxy")
	k := newKubeProxyFixture(t, s)

	t.Run("ClusterIPSpreadsOverLocalAndRemoteBackends", k.testClusterIP)
	t.Run("NodePortFromOtherNodesHost", k.testNodePort)
	t.Run("ClusterIPFromNodesHost", k.testClusterIPFromNode)
	if family == "ipv4" {
		// On IPv6 beside kube-proxy a fragmented datagram to the ClusterIP gets no answer
		// (make test, 2026-12-05: 10 of 10 from a pod); not fixed yet (docs/services.md).
		t.Run("FragmentedUDP", k.testFragmentedUDP)
	}
	t.Run("NoKovsServiceDatapath", k.testNoKovsServices)
	// Last: it isolates the backends.
	t.Run("NetworkPolicyAfterTranslation", k.testNetworkPolicy)
}

// testClusterIP: the client on node1 reaches the ClusterIP; new connections reach the
// backend on node1 and the one on node2, on the targetPort, from the client's own address.
func (k *kubeProxyFixture) testClusterIP(t *testing.T) {
	from := k.s.PodClient(k.client)
	k.waitAnswered(t, from, k.vip, "80/tcp", "ClusterIP through kube-proxy")
	a := k.s.Spread(from, k.vip, "80/tcp", kubeProxySpreadProbes, probeTimeout)
	if err := allOf(a, k.backends()...); err != nil {
		t.Errorf("%d connections from %s (node1) to %s: %v", kubeProxySpreadProbes, from.Name, target(k.vip, "80/tcp"), err)
	}
	want := addrOf(from, k.vip)
	for _, r := range a.Results {
		if r.Reply == nil {
			continue
		}
		if r.Reply.Peer.Addr() != want || r.Reply.Port.String() != "8080/tcp" {
			t.Errorf("backend %s saw %s on %s, want the client pod's own address %s on targetPort 8080/tcp "+
				"(kube-proxy must not masquerade pod traffic)", r.Reply.Identity, r.Reply.Peer, r.Reply.Port, want)
			break
		}
	}
}

// testNodePort: node2's own namespace reaches node1's address on the NodePort (kube-proxy
// serves its Node's InternalIP, `--nodeport-addresses primary`), and new connections
// reach both backends.
func (k *kubeProxyFixture) testNodePort(t *testing.T) {
	np := port(nodePort(t, k.svc, "web"), corev1.ProtocolTCP)
	from := k.s.NodeClient(t, "node2")
	node1 := k.s.NodeIPs(t, "node1")[0]
	k.waitAnswered(t, from, node1, np, "NodePort of node1 from node2's host")
	if err := allOf(k.s.Spread(from, node1, np, kubeProxySpreadProbes, probeTimeout), k.backends()...); err != nil {
		t.Errorf("%d connections from node2's host to %s: %v", kubeProxySpreadProbes, target(node1, np), err)
	}
}

// testClusterIPFromNode: node2's own namespace reaches the ClusterIP (kube-proxy's DNAT in
// the output hook), and new connections reach both backends.
func (k *kubeProxyFixture) testClusterIPFromNode(t *testing.T) {
	from := k.s.NodeClient(t, "node2")
	k.waitAnswered(t, from, k.vip, "80/tcp", "ClusterIP from node2's host")
	if err := allOf(k.s.Spread(from, k.vip, "80/tcp", kubeProxySpreadProbes, probeTimeout), k.backends()...); err != nil {
		t.Errorf("%d connections from node2's host to %s: %v", kubeProxySpreadProbes, target(k.vip, "80/tcp"), err)
	}
}

// testFragmentedUDP: 2,000-byte UDP datagrams, sent in fragments, reach a backend through
// kube-proxy's ClusterIP from a pod and from another node's host, and through node1's
// NodePort from node2's host: kovs's fragment handling is for its own Service proxy, and
// br-int passes the fragments of kube-proxy's translated datagrams as any others.
func (k *kubeProxyFixture) testFragmentedUDP(t *testing.T) {
	node1 := k.s.NodeIPs(t, "node1")[0]
	for _, tc := range []struct {
		from framework.Client
		addr netip.Addr
		port uint16
	}{
		{k.s.PodClient(k.client), k.vip, 53},
		{k.s.NodeClient(t, "node2"), k.vip, 53},
		{k.s.NodeClient(t, "node2"), node1, uint16(nodePort(t, k.svc, "dns"))},
	} {
		p := portUDP(tc.port)
		k.waitAnswered(t, tc.from, tc.addr, p, "a small datagram through kube-proxy")
		for i := range bigDatagrams {
			r := k.s.ProbeDatagramFrom(tc.from, tc.addr, tc.port, bigDatagram, probeTimeout)
			if !r.Connected || r.Reply == nil || !slices.Contains(k.backends(), r.Reply.Identity) {
				t.Errorf("%d-byte datagram %d of %d to %s from %s (a small one was answered): %s", bigDatagram, i+1, bigDatagrams,
					target(tc.addr, p), tc.from.Name, framework.Describe(r))
			}
		}
	}
}

// testNoKovsServices: on every node, br-int has no Service flows (the Service tables hold
// only their miss flows) and no groups, and the host has kube-proxy's nftables table, with
// the Service's ClusterIP in it, and neither kovs's table nor a route for the ClusterIP.
func (k *kubeProxyFixture) testNoKovsServices(t *testing.T) {
	for _, node := range []string{"node1", "node2"} {
		for _, err := range k.kovsServiceState(t, node) {
			t.Errorf("%s: %v", node, err)
		}
		for _, err := range k.kubeProxyHostState(t, node) {
			t.Errorf("%s: %v", node, err)
		}
		// kube-proxy's URLs are kube-proxy's: kovs-agent serves them only with
		// --service-proxy=kovs.
		for _, port := range []string{"10256", "10249"} {
			out := inNode(t, k.s.Layout.NodeNetNS(node), "ss", "-ltnpH", "sport = :"+port)
			if !strings.Contains(out, `"kube-proxy"`) || strings.Contains(out, `"kovs-agent"`) {
				t.Errorf("%s: port %s should be kube-proxy's alone; listeners:\n%s", node, port, out)
			}
		}
	}
}

// testNetworkPolicy: an ingress policy on the backends that admits only another role
// makes the client's connections to the ClusterIP fail, whichever backend kube-proxy
// picks; once it admits the client's role they work again. Both hold only if br-int sees
// the client pod's address after kube-proxy's DNAT: a connection masqueraded to node1's
// gateway address would pass node1's backend, which always admits its own node.
func (k *kubeProxyFixture) testNetworkPolicy(t *testing.T) {
	from := k.s.PodClient(k.client)
	policies := k.s.Client.NetworkingV1().NetworkPolicies(k.ns)
	policy := &networkingv1.NetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{Namespace: k.ns, Name: "web-ingress"},
		Spec: networkingv1.NetworkPolicySpec{
			PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}},
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress},
			Ingress: []networkingv1.NetworkPolicyIngressRule{{From: []networkingv1.NetworkPolicyPeer{{
				PodSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"role": "other"}}}}}},
		},
	}
	ctx := context.Background()
	if _, err := policies.Create(ctx, policy, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create NetworkPolicy: %v", err)
	}
	framework.Eventually(t, programTimeout, "the policy to deny "+from.Name+" through the ClusterIP", func() error {
		return noneAnswered(k.probeAtOnce(from, k.vip, "80/tcp", deniedProbes, deniedTimeout))
	})
	// Each connection picks its backend anew: all of them fail, so both backends deny.
	if err := noneAnswered(k.probeAtOnce(from, k.vip, "80/tcp", deniedProbes, deniedTimeout)); err != nil {
		t.Errorf("denied client %s through %s: %v", from.Name, target(k.vip, "80/tcp"), err)
	}

	// A merge patch replaces the rule list. An Update of the object read at Create would
	// conflict: kovs-controller annotates the policy with its realization meanwhile.
	allowClient := `{"spec":{"ingress":[{"from":[{"podSelector":{"matchLabels":{"role":"client"}}}]}]}}`
	if _, err := policies.Patch(ctx, policy.Name, types.MergePatchType, []byte(allowClient), metav1.PatchOptions{}); err != nil {
		t.Fatalf("patch NetworkPolicy to admit role=client: %v", err)
	}
	k.waitAnswered(t, from, k.vip, "80/tcp", "ClusterIP once the policy admits the client")
	if err := allOf(k.s.Spread(from, k.vip, "80/tcp", kubeProxySpreadProbes, probeTimeout), k.backends()...); err != nil {
		t.Errorf("allowed client %s through %s: %v", from.Name, target(k.vip, "80/tcp"), err)
	}
}

// kubeProxyProcessesRunning fails the test unless every node runs its kube-proxy.
func kubeProxyProcessesRunning(t *testing.T, s *framework.Sandbox) {
	t.Helper()
	for _, node := range []string{"node1", "node2"} {
		if name := sandbox.KubeProxyProcess(node); !s.Layout.Running(name) {
			t.Fatalf("%s is not running (see %s/%s.log)", name, s.Layout.LogDir(), name)
		}
	}
}

// newKubeProxyFixture creates, in namespace kp: backends web-1 on node1 and web-2 on
// node2 (app=web, http 8080/tcp), the client on node1 (role=client) and the NodePort
// Service web (80/tcp to the named port http), and waits for its endpoints.
func newKubeProxyFixture(t *testing.T, s *framework.Sandbox) *kubeProxyFixture {
	kubeProxyProcessesRunning(t, s)
	k := &kubeProxyFixture{s: s, ns: "kp"}
	ports := []corev1.ContainerPort{{Name: "http", ContainerPort: 8080, Protocol: corev1.ProtocolTCP},
		{Name: "dns", ContainerPort: 5353, Protocol: corev1.ProtocolUDP}}
	specs := []framework.PodSpec{
		{Namespace: k.ns, Name: "web-1", Node: "node1", Labels: map[string]string{"app": "web"}, Ports: ports},
		{Namespace: k.ns, Name: "web-2", Node: "node2", Labels: map[string]string{"app": "web"}, Ports: ports},
		{Namespace: k.ns, Name: "client", Node: "node1", Labels: map[string]string{"role": "client"}},
	}
	for _, sp := range specs {
		s.CreatePod(t, sp)
	}
	for _, sp := range specs {
		p := s.WaitRunning(t, sp.Namespace, sp.Name, podTimeout)
		if sp.Name == "client" {
			k.client = p
		} else {
			k.web = append(k.web, p)
		}
	}
	k.svc = s.CreateService(t, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: k.ns, Name: "web"},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeNodePort, Selector: map[string]string{"app": "web"},
			Ports: []corev1.ServicePort{svcPort("web", 80, intstr.FromString("http"), corev1.ProtocolTCP),
				svcPort("dns", 53, intstr.FromString("dns"), corev1.ProtocolUDP)}},
	})
	k.vip = framework.ClusterIPs(k.svc)[0]
	s.WaitEndpoints(t, k.ns, "web", []string{"web-1", "web-2"}, programTimeout)
	return k
}

// Probe counts and timeouts of TestServicesKubeProxy.
const (
	// kubeProxySpreadProbes new connections miss one of two backends picked at random
	// with probability 2^-29.
	kubeProxySpreadProbes = 30
	// deniedProbes concurrent connections all go to one of two backends with probability
	// 2^-11; a denied one waits deniedTimeout for nothing.
	deniedProbes  = 12
	deniedTimeout = time.Second
)

// noneAnswered checks that no probe connected at all.
func noneAnswered(a framework.Answers) error {
	if n := len(a.Results) - a.Unanswered(); n > 0 {
		return fmt.Errorf("%d of %d connections answered: %s", n, len(a.Results), a)
	}
	for _, r := range a.Results {
		if r.Connected || r.Refused {
			return fmt.Errorf("a connection was not dropped: %s", framework.Describe(r))
		}
	}
	return nil
}
