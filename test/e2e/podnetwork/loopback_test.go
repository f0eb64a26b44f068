package podnetwork_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/kovs-net/kovs/go-controller/pkg/controller/ipam"
	"github.com/kovs-net/kovs/test/e2e/framework"
)

// statusFields are the JSON fields kovs-agent's /status may carry, as paths: what it tells
// anyone on its node's loopback. A new field fails checkLoopbackServers until
// docs/security.md says what it tells and this list takes it.
var statusFields = []string{
	"node", "time", "live", "ready", "checks", "checks[].name", "checks[].ok", "checks[].message",
	"bridge", "round", "flows", "flows.installed", "flows.byTable", "flows.desiredGeneration",
	"flows.installedGeneration", "flows.lastSync", "flows.lastFullSync", "flows.lastError", "pods",
	"peers", "peers[].node", "peers[].tunnelIP", "peers[].subnets", "rejectedPeers",
	"rejectedPeers[].node", "rejectedPeers[].reason", "policy", "policy.received",
	"policy.connected", "policy.receivedGeneration", "policy.realizedGeneration", "policy.rules",
}

// metricLabels are the label names kovs-agent's /metrics may carry.
var metricLabels = []string{"result", "table", "verb", "le", "quantile", "version", "family", "block"}

// checkLoopbackServers: what the agent's loopback servers (/healthz, /readyz, /status,
// /metrics) tell a hostNetwork pod on the node, which shares the node's loopback (issue
// 29). The test reads them from node1's network namespace, the one hostNetwork pods run in,
// once node1's agent has realized a NetworkPolicy over pod a (its received generation
// installed, rules > 0), and asserts they name no pod, namespace or policy and carry none of
// their addresses or UIDs; /status carries only statusFields, its peers only what the Node
// objects record; /metrics only kovs's counters by result, table and verb, and the node's
// address blocks' fill by family and block.
func (c *cluster) checkLoopbackServers(t *testing.T) {
	ctx := context.Background()
	const policyName = "loopback-secret-policy"
	np := &networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: "x", Name: policyName},
		Spec: networkingv1.NetworkPolicySpec{PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{"kovs-e2e-loopback": "a"}},
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress},
			Ingress: []networkingv1.NetworkPolicyIngressRule{{From: []networkingv1.NetworkPolicyPeer{{
				PodSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"kovs-e2e-loopback": "b"}}}}}}}}
	if _, err := c.s.Client.NetworkingV1().NetworkPolicies("x").Create(ctx, np, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	defer func() {
		_ = c.s.Client.NetworkingV1().NetworkPolicies("x").Delete(ctx, policyName, metav1.DeleteOptions{})
	}()
	for name, value := range map[string]string{"a": "a", "b": "b"} {
		patch := fmt.Sprintf(`{"metadata":{"labels":{"kovs-e2e-loopback":%q}}}`, value)
		if _, err := c.s.Client.CoreV1().Pods("x").Patch(ctx, name, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
		defer func() {
			_, _ = c.s.Client.CoreV1().Pods("x").Patch(ctx, name, types.MergePatchType,
				[]byte(`{"metadata":{"labels":{"kovs-e2e-loopback":null}}}`), metav1.PatchOptions{})
		}()
	}
	framework.Eventually(t, 30*time.Second, "node1's agent realizing the policy over pod a", func() error {
		st, err := c.s.AgentPolicyStatus("node1")
		if err != nil {
			return err
		}
		if st.Rules == 0 || st.RealizedGeneration != st.ReceivedGeneration {
			return fmt.Errorf("rules %d, received %d, realized %d", st.Rules, st.ReceivedGeneration, st.RealizedGeneration)
		}
		return nil
	})

	secrets := []string{policyName, "kovs-e2e-loopback"}
	for _, p := range append(slices.Collect(maps.Values(c.pods)), slices.Collect(maps.Values(c.hosts))...) {
		secrets = append(secrets, string(p.UID), p.Namespace+"/"+p.Name)
		if !p.Spec.HostNetwork {
			for _, ip := range framework.PodIPs(p) {
				secrets = append(secrets, ip.String())
			}
		}
	}
	bodies := map[string][]byte{}
	for _, path := range []string{"/healthz", "/readyz", "/status", "/metrics"} {
		b, err := c.s.AgentGet("node1", path)
		if err != nil {
			t.Fatalf("a hostNetwork pod on node1 reads %s: %v", path, err)
		}
		bodies[path] = b
		for _, s := range secrets {
			if bytes.Contains(b, []byte(s)) {
				t.Errorf("%s tells a hostNetwork pod %q", path, s)
			}
		}
	}
	c.checkStatusFields(t, bodies["/status"])
	checkMetricLabels(t, bodies["/metrics"])
}

// checkStatusFields: /status has only statusFields, and its peers are what the Nodes'
// records say (their names, recorded addresses and subnets).
func (c *cluster) checkStatusFields(t *testing.T, body []byte) {
	var doc any
	if err := json.Unmarshal(body, &doc); err != nil {
		t.Fatalf("/status: %v", err)
	}
	for _, f := range jsonPaths("", doc) {
		if !slices.Contains(statusFields, f) {
			t.Errorf("/status has field %s, which docs/security.md does not account for", f)
		}
	}
	var st struct {
		Peers []struct {
			Node     string   `json:"node"`
			TunnelIP string   `json:"tunnelIP"`
			Subnets  []string `json:"subnets"`
		} `json:"peers"`
	}
	_ = json.Unmarshal(body, &st)
	for _, p := range st.Peers {
		n, err := c.s.Client.CoreV1().Nodes().Get(context.Background(), p.Node, metav1.GetOptions{})
		if err != nil {
			t.Errorf("/status names peer %s, no Node: %v", p.Node, err)
			continue
		}
		record := n.Annotations[ipam.NodeAddressesAnnotationKey] + n.Annotations[ipam.NodeSubnetsAnnotationKey]
		for _, v := range append([]string{p.TunnelIP}, p.Subnets...) {
			if !strings.Contains(record, v) {
				t.Errorf("/status peer %s: %s is not in its Node's records %s", p.Node, v, record)
			}
		}
	}
}

// jsonPaths lists the paths of the fields in v ("a.b", "list[].c").
func jsonPaths(prefix string, v any) []string {
	var out []string
	switch v := v.(type) {
	case map[string]any:
		for k, sub := range v {
			p := k
			if prefix != "" {
				p = prefix + "." + k
			}
			if prefix == "flows.byTable" {
				continue // table names
			}
			out = append(out, p)
			out = append(out, jsonPaths(p, sub)...)
		}
	case []any:
		for _, sub := range v {
			out = append(out, jsonPaths(prefix+"[]", sub)...)
		}
	}
	sort.Strings(out)
	return slices.Compact(out)
}

// checkMetricLabels: /metrics has only label names of metricLabels.
func checkMetricLabels(t *testing.T, body []byte) {
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(bytes.NewReader(body))
	if err != nil {
		t.Fatalf("/metrics: %v", err)
	}
	for name, f := range families {
		for _, m := range f.Metric {
			for _, l := range m.Label {
				if !slices.Contains(metricLabels, l.GetName()) {
					t.Errorf("/metrics %s has label %s=%q, which docs/security.md does not account for", name, l.GetName(), l.GetValue())
				}
			}
		}
	}
}
