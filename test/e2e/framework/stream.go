package framework

import (
	"context"
	"crypto/x509"
	"net"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/kovs-net/kovs/go-controller/pkg/policy/stream"
	"github.com/kovs-net/kovs/go-controller/pkg/sandbox"
)

// NodeStreamAddress is where, inside a node's network namespace, the node reaches
// kovs-controller's policy stream (the node forwards it to the controller).
func NodeStreamAddress() string {
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(sandbox.NodeControllerPort))
}

// ControllerCA waits until kovs-controller has published its CA in kube-system/kovs-ca
// and returns it (the roots an agent trusts for the policy stream).
func (s *Sandbox) ControllerCA(t testing.TB) *x509.CertPool {
	t.Helper()
	var ca *x509.CertPool
	Eventually(t, 30*time.Second, "the controller's CA in kube-system/kovs-ca", func() error {
		var err error
		ca, err = stream.CAFromConfigMap(s.Client, "kube-system", "kovs-ca")(context.Background())
		return err
	})
	return ca
}

// AgentToken is the token the sandbox gave node's agent for the policy stream.
func (s *Sandbox) AgentToken(t testing.TB, node string) string {
	t.Helper()
	b, err := os.ReadFile(s.Layout.ControllerTokenFile(node))
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}
