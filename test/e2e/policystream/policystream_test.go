// End-to-end tests of the NetworkPolicy stream between kovs-controller and the agents,
// against a real kube-apiserver: node-bound ServiceAccount tokens checked by TokenReview,
// the controller's own CA published in kube-system/kovs-ca, the stream reached from inside
// a node through the node's forwarder, and the realization status on NetworkPolicies.
// Needs root; runs under `make e2e`.
package policystream_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"
	authnv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/kovs-net/kovs/go-controller/pkg/controller/realization"
	"github.com/kovs-net/kovs/go-controller/pkg/policy"
	"github.com/kovs-net/kovs/go-controller/pkg/policy/stream"
	"github.com/kovs-net/kovs/go-controller/pkg/sandbox"
	"github.com/kovs-net/kovs/test/e2e/framework"
)

func TestPolicyStream(t *testing.T) {
	env := framework.Require(t)
	s := framework.Up(t, env, "--nodes", "2")
	c := newCluster(t, s)

	t.Run("an agent streams its own node's share", func(t *testing.T) {
		sink := newSink()
		c.follow(t, "node1", c.s.AgentToken(t, "node1"), sink)
		sink.wait(t, "a snapshot of node1", func(share policy.NodeShare) bool { return share.Node == "node1" })
	})

	t.Run("an agent cannot stream another node's share", func(t *testing.T) {
		token := c.s.AgentToken(t, "node1")
		if code := c.get(t, "node2", token); code != http.StatusForbidden {
			t.Errorf("node1's agent asking for node2's share: %d, want 403", code)
		}
		if code := c.report(t, "node2", token); code != http.StatusForbidden {
			t.Errorf("node1's agent reporting for node2: %d, want 403", code)
		}
	})

	t.Run("clients that are not agents are refused", func(t *testing.T) {
		cases := []struct {
			name  string
			token string
			want  int
		}{
			{"no token", "", http.StatusUnauthorized},
			{"a forged token", "eyJhbGciOiJSUzI1NiJ9.e30.forged", http.StatusUnauthorized},
			{"a token for kube-apiserver, not for the controller",
				c.token(t, "kube-system", "default", "node1", nil), http.StatusUnauthorized},
			{"another ServiceAccount's node-bound token",
				c.token(t, "default", "default", "node1", []string{stream.TokenAudience}), http.StatusForbidden},
			{"an agent token bound to no node",
				c.token(t, "kube-system", "kovs-agent", "", []string{stream.TokenAudience}), http.StatusForbidden},
		}
		for _, tc := range cases {
			if code := c.get(t, "node1", tc.token); code != tc.want {
				t.Errorf("%s: %d, want %d", tc.name, code, tc.want)
			}
		}
	})

	t.Run("the controller's certificate is verified", func(t *testing.T) {
		apiserverCA := x509.NewCertPool()
		b, err := os.ReadFile(filepath.Join(s.Layout.PKIDir(), "ca.crt"))
		if err != nil || !apiserverCA.AppendCertsFromPEM(b) {
			t.Fatalf("read the sandbox CA: %v", err)
		}
		if _, err := c.client(apiserverCA, stream.DefaultServerName).Get(c.url("node1")); err == nil {
			t.Error("a client trusting only kube-apiserver's CA accepted the controller")
		}
		if _, err := c.client(c.ca, "evil.example").Get(c.url("node1")); err == nil {
			t.Error("the controller's certificate was accepted for another name")
		}
	})

	t.Run("a NetworkPolicy is realized on the nodes it concerns", func(t *testing.T) {
		// Stand-ins for the agents: they realize what they receive at once. They stream
		// next to the real agents (two streams per node are allowed).
		for _, node := range []string{"node1", "node2"} {
			c.follow(t, node, c.s.AgentToken(t, node), newSink())
		}
		c.checkRealization(t, "stand-ins")
	})
}

// TestAgentsRealizePolicy checks that the real agents stream and report: a policy is
// realized with no other client. Two kovs-controller replicas run, and the last subtest
// kills the leader under churn.
func TestAgentsRealizePolicy(t *testing.T) {
	env := framework.Require(t)
	s := framework.Up(t, env, "--nodes", "2", "--controller-replicas", "2")
	c := newCluster(t, s)
	for _, node := range []string{"node1", "node2"} {
		log := s.Layout.LogFile(node + "-kovs-agent")
		framework.Eventually(t, 30*time.Second, node+"'s agent to receive its share", func() error {
			b, err := os.ReadFile(log)
			if err != nil {
				return err
			}
			if !strings.Contains(string(b), "policy snapshot received") {
				return errors.New("no snapshot in " + log)
			}
			return nil
		})
	}
	c.checkRealization(t, "agents")
	t.Run("controller failover under churn", c.checkFailover)
	t.Run("an agent of the previous release with this controller", c.checkOlderAgent)
	t.Run("this release's agents with a controller of the previous release", c.checkOlderController)
}

// cluster is a sandbox seen from the policy stream's side.
type cluster struct {
	s  *framework.Sandbox
	ca *x509.CertPool
}

func newCluster(t *testing.T, s *framework.Sandbox) *cluster {
	c := &cluster{s: s}
	c.ca = s.ControllerCA(t)
	return c
}

// dial connects from inside node1's namespace, as an agent does: to the node's own
// loopback, which the node emulator forwards to the controller.
func (c *cluster) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	var conn net.Conn
	err := ns.WithNetNSPath(sandbox.NetNSPath(c.s.Layout.NodeNetNS("node1")), func(ns.NetNS) error {
		var err error
		conn, err = (&net.Dialer{Timeout: 5 * time.Second}).DialContext(ctx, network, addr)
		return err
	})
	return conn, err
}

func (c *cluster) url(node string) string {
	return "https://" + framework.NodeStreamAddress() + stream.PolicyPath(node)
}

func (c *cluster) client(roots *x509.CertPool, serverName string) *http.Client {
	return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DialContext: c.dial, ForceAttemptHTTP2: true,
		TLSClientConfig: &tls.Config{RootCAs: roots, ServerName: serverName}}}
}

// do sends one request with token and returns the status code (a stream is closed at
// once).
func (c *cluster) do(t *testing.T, method, url, token, body string) int {
	t.Helper()
	req, _ := http.NewRequest(method, url, strings.NewReader(body))
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := c.client(c.ca, stream.DefaultServerName).Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

func (c *cluster) get(t *testing.T, node, token string) int {
	return c.do(t, http.MethodGet, c.url(node), token, "")
}

func (c *cluster) report(t *testing.T, node, token string) int {
	return c.do(t, http.MethodPost, "https://"+framework.NodeStreamAddress()+stream.RealizedPath(node), token, `{"generation":0}`)
}

// token requests a token of a ServiceAccount, bound to node unless node is empty.
func (c *cluster) token(t *testing.T, namespace, sa, node string, audiences []string) string {
	t.Helper()
	ctx := context.Background()
	if node != "" && audiences != nil {
		tok, err := sandbox.NodeBoundToken(ctx, c.s.Client, namespace, sa, node)
		if err != nil {
			t.Fatal(err)
		}
		return tok
	}
	req := &authnv1.TokenRequest{Spec: authnv1.TokenRequestSpec{Audiences: audiences}}
	if node != "" {
		n, err := c.s.Client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		req.Spec.BoundObjectRef = &authnv1.BoundObjectReference{Kind: "Node", APIVersion: "v1", Name: n.Name, UID: n.UID}
	}
	tr, err := c.s.Client.CoreV1().ServiceAccounts(namespace).CreateToken(ctx, sa, req, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("token of %s/%s: %v", namespace, sa, err)
	}
	return tr.Status.Token
}

// follow streams node's share into sink, from inside node1's namespace, until the test
// ends.
func (c *cluster) follow(t *testing.T, node, token string, sink policy.Sink) {
	t.Helper()
	client, err := stream.NewClient(stream.ClientConfig{Node: node, Address: framework.NodeStreamAddress(),
		Token:   func() (string, error) { return token, nil },
		RootCAs: stream.CAFromConfigMap(c.s.Client, "kube-system", "kovs-ca"),
		Dial:    c.dial, MinBackoff: 100 * time.Millisecond, MaxBackoff: time.Second, ReportPoll: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = client.Run(ctx, sink) }()
	t.Cleanup(func() { cancel(); <-done })
}

// checkRealization creates pods on both nodes and a policy over them, and waits until the
// policy is realized on both.
func (c *cluster) checkRealization(t *testing.T, who string) {
	ns := "rz-" + who
	c.s.EnsureNamespace(t, ns, nil)
	c.s.CreatePod(t, framework.PodSpec{Namespace: ns, Name: "a", Node: "node1", Labels: map[string]string{"app": "rz"}})
	c.s.CreatePod(t, framework.PodSpec{Namespace: ns, Name: "b", Node: "node2", Labels: map[string]string{"app": "rz"}})
	port := intstr.FromInt32(80)
	np := &networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "allow-rz"},
		Spec: networkingv1.NetworkPolicySpec{PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{"app": "rz"}},
			Ingress: []networkingv1.NetworkPolicyIngressRule{{
				From:  []networkingv1.NetworkPolicyPeer{{PodSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "rz"}}}},
				Ports: []networkingv1.NetworkPolicyPort{{Port: &port}}}}}}
	ctx := context.Background()
	start := time.Now()
	if _, err := c.s.Client.NetworkingV1().NetworkPolicies(ns).Create(ctx, np, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var st realization.Status
	framework.Eventually(t, 60*time.Second, "the policy realized on 2/2 nodes", func() error {
		got, err := c.s.Client.NetworkingV1().NetworkPolicies(ns).Get(ctx, np.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		value := got.Annotations[realization.AnnotationKey]
		if st, err = realization.ParseStatus(value); err != nil {
			return err
		}
		if st.Concerned != 2 || !st.Complete() {
			return fmt.Errorf("%s is %q", realization.AnnotationKey, value)
		}
		return nil
	})
	t.Logf("%s: %s %q after %s", who, realization.AnnotationKey, st, time.Since(start).Round(time.Millisecond))
	framework.Eventually(t, 30*time.Second, "a "+realization.ReasonRealized+" event", func() error {
		evs, err := c.s.Client.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "reason=" + realization.ReasonRealized})
		if err != nil {
			return err
		}
		for _, e := range evs.Items {
			if e.InvolvedObject.Kind == "NetworkPolicy" && e.InvolvedObject.Name == np.Name && e.Type == corev1.EventTypeNormal {
				return nil
			}
		}
		return fmt.Errorf("%d %s events, none for %s", len(evs.Items), realization.ReasonRealized, np.Name)
	})
}

// sink stands in for an agent: it applies what it receives and realizes it at once.
type sink struct {
	mu    sync.Mutex
	share policy.NodeShare
	have  bool
}

func newSink() *sink { return &sink{} }

func (s *sink) Snapshot(share policy.NodeShare) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.share, s.have = share, true
	return nil
}

func (s *sink) Delta(d policy.Delta) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return d.Apply(&s.share)
}

func (s *sink) Realized() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.share.Generation
}

func (s *sink) wait(t *testing.T, what string, ok func(policy.NodeShare) bool) {
	t.Helper()
	framework.Eventually(t, 30*time.Second, what, func() error {
		s.mu.Lock()
		defer s.mu.Unlock()
		if !s.have || !ok(s.share) {
			return errors.New("not yet")
		}
		return nil
	})
}
