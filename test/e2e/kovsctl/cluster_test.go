package kovsctl_test

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kovs-net/kovs/go-controller/pkg/controller/realization"
	"github.com/kovs-net/kovs/test/e2e/framework"
)

const (
	ns          = "kc"
	podTimeout  = 90 * time.Second
	policyWait  = 60 * time.Second
	probeWindow = 1500 * time.Millisecond
)

// cluster is a 2-node sandbox with, in namespace kc:
//
//	node1: client (app=client), db (app=db), other (app=other)
//	node2: web (app=web), peer (app=peer)
//
// and three NetworkPolicies:
//
//	kc/web-ingress    web accepts TCP 80 from client only (ingress)
//	kc/db-ingress     db accepts TCP 80 from client only (ingress)
//	kc/client-egress  client may send TCP 80 to web and db only (egress)
//
// other and peer are selected by no policy.
type cluster struct {
	s    *framework.Sandbox
	env  framework.Env
	pods map[string]*corev1.Pod // by name
}

var placement = map[string]string{"client": "node1", "db": "node1", "other": "node1", "web": "node2", "peer": "node2"}

const policies = `
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: web-ingress, namespace: kc}
spec:
  podSelector: {matchLabels: {app: web}}
  policyTypes: [Ingress]
  ingress:
  - from: [{podSelector: {matchLabels: {app: client}}}]
    ports: [{protocol: TCP, port: 80}]
---
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: db-ingress, namespace: kc}
spec:
  podSelector: {matchLabels: {app: db}}
  policyTypes: [Ingress]
  ingress:
  - from: [{podSelector: {matchLabels: {app: client}}}]
    ports: [{protocol: TCP, port: 80}]
---
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: client-egress, namespace: kc}
spec:
  podSelector: {matchLabels: {app: client}}
  policyTypes: [Egress]
  egress:
  - to: [{podSelector: {matchLabels: {app: web}}}, {podSelector: {matchLabels: {app: db}}}]
    ports: [{protocol: TCP, port: 80}]
`

var policyNames = []string{"web-ingress", "db-ingress", "client-egress"}

func newCluster(t *testing.T, family string) *cluster {
	env := framework.Require(t)
	if _, err := exec.LookPath("ovs-ofctl"); err != nil {
		t.Fatal("ovs-ofctl not found: the tests compare kovsctl with OVS's own tools")
	}
	s := framework.Up(t, env, "--nodes", "2", "--ip-family", family)
	c := &cluster{s: s, env: env, pods: map[string]*corev1.Pod{}}
	s.EnsureNamespace(t, ns, nil)
	for name, node := range placement {
		s.CreatePod(t, framework.PodSpec{Namespace: ns, Name: name, Node: node, Labels: map[string]string{"app": name}})
	}
	for name := range placement {
		c.pods[name] = s.WaitRunning(t, ns, name, podTimeout)
	}
	s.Apply(policies)
	c.waitPoliciesEnforced(t)
	return c
}

// waitPoliciesEnforced waits until kovs-controller says every policy is enforced on every
// node it concerns.
func (c *cluster) waitPoliciesEnforced(t *testing.T) {
	framework.Eventually(t, policyWait, "NetworkPolicies enforced", func() error {
		for _, name := range policyNames {
			np, err := c.s.Client.NetworkingV1().NetworkPolicies(ns).Get(context.Background(), name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			st, err := realization.ParseStatus(np.Annotations[realization.AnnotationKey])
			if err != nil {
				return fmt.Errorf("%s: %w", name, err)
			}
			if !st.Complete() || st.Concerned == 0 {
				return fmt.Errorf("%s: %s", name, st)
			}
		}
		return nil
	})
}

// kovsctl runs the built kovsctl against the sandbox, with the sandbox's per-node OVS
// directories as `--ovs-dir` (as hack/demo.sh does).
func (c *cluster) kovsctl(args ...string) (string, error) {
	return c.kovsctlIn(strings.ReplaceAll(c.s.Layout.OVSDir("NODE"), "NODE", "{node}"), args...)
}

// kovsctlIn runs kovsctl with another --ovs-dir template.
func (c *cluster) kovsctlIn(ovsDir string, args ...string) (string, error) {
	full := append([]string{"--kubeconfig", c.s.Layout.Kubeconfig(), "--ovs-dir", ovsDir}, args...)
	cmd := exec.Command(filepath.Join(c.env.BinDir, "kovsctl"), full...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("kovsctl %s: %w\n%s", strings.Join(args, " "), err, out)
	}
	return string(out), nil
}

func (c *cluster) mustKovsctl(t *testing.T, args ...string) string {
	t.Helper()
	out, err := c.kovsctl(args...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// ofctl runs ovs-ofctl (OpenFlow 1.5, as kovs speaks) on a node's br-int.
func (c *cluster) ofctl(t *testing.T, node string, args ...string) string {
	t.Helper()
	full := append([]string{"-O", "OpenFlow15", "--no-names"}, args...)
	for i, a := range full {
		if a == "BRIDGE" {
			full[i] = c.s.BrIntTarget(node)
		}
	}
	out, err := exec.Command("ovs-ofctl", full...).CombinedOutput()
	if err != nil {
		t.Fatalf("ovs-ofctl %v: %v\n%s", full, err, out)
	}
	return string(out)
}

// vsctl runs ovs-vsctl against a node's OVS database.
func (c *cluster) vsctl(t *testing.T, node string, args ...string) string {
	t.Helper()
	out, err := exec.Command("ovs-vsctl", append([]string{"--db", c.s.OVSDB(node)}, args...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("ovs-vsctl %v: %v\n%s", args, err, out)
	}
	return string(out)
}

// appctl runs ovs-appctl against a node's ovs-vswitchd.
func (c *cluster) appctl(t *testing.T, node string, args ...string) string {
	t.Helper()
	ctl := filepath.Join(c.s.Layout.OVSDir(node), "ovs-vswitchd.ctl")
	out, err := exec.Command("ovs-appctl", append([]string{"-t", ctl}, args...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("ovs-appctl %v: %v\n%s", args, err, out)
	}
	return string(out)
}
