package operate_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/kovs-net/kovs/go-controller/pkg/kovsctl"
	"github.com/kovs-net/kovs/go-controller/pkg/pipeline"
	"github.com/kovs-net/kovs/go-controller/pkg/sandbox"
	"github.com/kovs-net/kovs/test/e2e/framework"
)

func (c *cluster) checkAgentMetrics(t *testing.T) {
	for _, node := range nodes {
		t.Run(node, func(t *testing.T) {
			m := c.scrapeAgent(t, node)
			pods := float64(podsOn(node))
			if got := m.sum("kovs_agent_cni_requests_total", labels{"verb": "ADD", "result": "success"}); got != pods {
				t.Errorf("CNI ADD successes = %v, want %v (the kovs pods created on %s)", got, pods, node)
			}
			if got := m.sum("kovs_agent_pod_network_setup_seconds_count", labels{"result": "success"}); got != pods {
				t.Errorf("pod network setup latency samples = %v, want %v", got, pods)
			}
			if sum, count := m.sum("kovs_agent_pod_network_setup_seconds_sum", nil), m.sum("kovs_agent_pod_network_setup_seconds_count", nil); count == 0 || sum <= 0 || sum/count > 60 {
				t.Errorf("pod network setup: %v s over %v samples: implausible", sum, count)
			}
			if got := m.sum("kovs_agent_pod_ports", nil); got != pods {
				t.Errorf("kovs_agent_pod_ports = %v, want %v", got, pods)
			}
			if got := m.sum("kovs_agent_tunnel_peers", nil); got != float64(len(nodes)-1) {
				t.Errorf("kovs_agent_tunnel_peers = %v, want %d", got, len(nodes)-1)
			}
			for _, series := range []string{"kovs_agent_openflow_bundle_seconds_count", "kovs_agent_policy_realization_seconds_count",
				"kovs_agent_flow_full_resync_seconds_count"} {
				if got := m.sum(series, nil); got < 1 {
					t.Errorf("%s = %v, want at least 1", series, got)
				}
			}
			if got := m.sum("kovs_agent_flow_full_resyncs_total", labels{"result": "success"}); got < 1 {
				t.Errorf("successful full resyncs = %v, want at least 1", got)
			}
			if !m.has("kovs_agent_openflow_bundle_errors_total") {
				t.Errorf("kovs_agent_openflow_bundle_errors_total missing")
			}
			tables := m.byLabel("kovs_agent_flows", "table")
			for _, want := range []string{"Classifier", "SpoofGuard", "L3Forwarding", "IngressPolicy", "Output"} {
				if tables[want] == 0 {
					t.Errorf("kovs_agent_flows{table=%q} = 0 or missing (tables: %v)", want, tables)
				}
			}
			// Flows per table add up to what br-int really holds.
			framework.Eventually(t, 15*time.Second, "kovs_agent_flows sum equal to dump-flows on "+node, func() error {
				want, err := c.dumpedFlows(node)
				if err != nil {
					return err
				}
				got := c.scrapeAgent(t, node).sum("kovs_agent_flows", nil)
				if got != float64(want) {
					return fmt.Errorf("sum(kovs_agent_flows) = %v, ovs-ofctl dump-flows has %d", got, want)
				}
				t.Logf("%s: %d flows on br-int, per table %v", node, want, tables)
				return nil
			})
		})
	}
}

func (c *cluster) checkControllerMetrics(t *testing.T) {
	m := c.scrapeController(t)
	total := 0.0
	for _, node := range nodes {
		// A node's pod addresses are its agent's: its /metrics says how full its block is.
		pods := float64(podsOn(node))
		total += pods
		a := c.scrapeAgent(t, node)
		if got := a.sum("kovs_agent_pod_addresses_allocated", labels{"family": "ipv4"}); got != pods {
			t.Errorf("%s: kovs_agent_pod_addresses_allocated = %v, want %v (its kovs pods)", node, got, pods)
		}
		if got := a.sum("kovs_agent_pod_addresses_capacity", labels{"family": "ipv4"}); got != 253 {
			t.Errorf("%s: kovs_agent_pod_addresses_capacity = %v, want 253 (a /24)", node, got)
		}
	}
	cidr := labels{"cluster_cidr": "10.244.0.0/16"}
	for name, want := range map[string]float64{
		"kovs_node_subnets_allocated":         float64(len(nodes)),
		"kovs_node_subnets_capacity":          256, // /16 in /24 blocks
		"kovs_cluster_pod_addresses_capacity": 256 * 253,
	} {
		if got := m.sum(name, cidr); got != want {
			t.Errorf("%s = %v, want %v", name, got, want)
		}
	}
	for _, ctl := range []string{"pod-bandwidth", "node-subnets", "policy-realization"} {
		if !m.has("kovs_reconcile_queue_depth", labels{"controller": ctl}) {
			t.Errorf("kovs_reconcile_queue_depth{controller=%q} missing", ctl)
		}
		if got := m.sum("kovs_reconcile_duration_seconds_count", labels{"controller": ctl}); got < 1 {
			t.Errorf("kovs_reconcile_duration_seconds_count{controller=%q} = %v, want at least 1", ctl, got)
		}
	}
	if got := m.sum("kovs_reconcile_duration_seconds_count", labels{"controller": "pod-bandwidth", "result": "success"}); got < total {
		t.Errorf("pod-bandwidth reconciles = %v, want at least one per pod (%v)", got, total)
	}
	if got := m.sum("kovs_controller_policy_realization_seconds_count", nil); got < float64(len(nodes)) {
		t.Errorf("controller policy realization samples = %v, want at least one per node", got)
	}
	if got := m.sum("kovs_networkpolicies", labels{"state": "complete"}); got != 1 {
		t.Errorf("complete NetworkPolicies = %v, want 1", got)
	}
	if got := m.sum("kovs_networkpolicy_realized_nodes", labels{"namespace": ns, "name": "b-from-a"}); got != 1 {
		t.Errorf("b-from-a realized on %v nodes, want 1 (node2, where the b pods are)", got)
	}
	if got := m.sum("kovs_controller_leader", nil); got != 1 {
		t.Errorf("kovs_controller_leader = %v, want 1", got)
	}
}

func (c *cluster) checkHealth(t *testing.T) {
	for _, node := range nodes {
		for _, path := range []string{"/healthz", "/readyz"} {
			code, body := c.getAgent(t, node, path)
			if code != http.StatusOK {
				t.Errorf("%s agent %s = %d: %s", node, path, code, body)
			}
		}
		_, body := c.getAgent(t, node, "/readyz")
		for _, check := range []string{"[+]ovs", "[+]bridge", "[+]flows", "[+]cni-server", "[+]policy-feed"} {
			if !strings.Contains(body, check) {
				t.Errorf("%s agent /readyz lacks %q:\n%s", node, check, body)
			}
		}
	}
	for _, path := range []string{"/healthz", "/readyz"} {
		code, body := get(t, http.DefaultClient, c.controllerURL(t, path))
		if code != http.StatusOK {
			t.Errorf("controller %s = %d: %s", path, code, body)
		}
		if path == "/readyz" && !strings.Contains(body, "leader") {
			t.Errorf("controller /readyz = %q, want it to say leader", body)
		}
	}
}

// --- scraping ---

func (c *cluster) state(t *testing.T) *sandbox.State {
	t.Helper()
	st, err := c.s.Layout.LoadState()
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// agentClient reaches the agents' listeners inside their node namespaces.
func (c *cluster) agentClient(node string) *http.Client {
	dial := kovsctl.DialIn(c.s.Layout.NodeNetNS(node))
	return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DisableKeepAlives: true,
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) { return dial(ctx, network, addr) }}}
}

func (c *cluster) getAgent(t *testing.T, node, path string) (int, string) {
	t.Helper()
	port := c.state(t).AgentMetricsPort
	if port == 0 {
		t.Fatal("the sandbox recorded no agent metrics port")
	}
	return get(t, c.agentClient(node), "http://"+net.JoinHostPort("127.0.0.1", strconv.Itoa(port))+path)
}

func (c *cluster) scrapeAgent(t *testing.T, node string) metrics {
	t.Helper()
	code, body := c.getAgent(t, node, "/metrics")
	if code != http.StatusOK {
		t.Fatalf("%s agent /metrics = %d: %s", node, code, body)
	}
	return parseMetrics(t, body)
}

func (c *cluster) controllerURL(t *testing.T, path string) string {
	return "http://" + net.JoinHostPort("127.0.0.1", strconv.Itoa(c.state(t).MetricsPort)) + path
}

func (c *cluster) scrapeController(t *testing.T) metrics {
	t.Helper()
	code, body := get(t, http.DefaultClient, c.controllerURL(t, "/metrics"))
	if code != http.StatusOK {
		t.Fatalf("controller /metrics = %d: %s", code, body)
	}
	return parseMetrics(t, body)
}

func get(t *testing.T, client *http.Client, url string) (int, string) {
	t.Helper()
	resp, err := client.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	return resp.StatusCode, string(b)
}

// dumpedFlows counts the flows on the node's br-int, as ovs-ofctl dumps them, except
// those the switch learned itself (SCTP replies: the agent never installs them).
func (c *cluster) dumpedFlows(node string) (int, error) {
	out, err := exec.Command("ovs-ofctl", "-O", "OpenFlow15", "--no-stats", "dump-flows", c.s.BrIntTarget(node)).CombinedOutput()
	if err != nil {
		return 0, fmt.Errorf("ovs-ofctl dump-flows on %s: %v: %s", node, err, out)
	}
	n := 0
	for _, line := range strings.Split(string(out), "\n") {
		if !strings.Contains(line, "actions=") {
			continue
		}
		cookie := uint64(0)
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "cookie="); ok {
			v, _, _ = strings.Cut(v, ",")
			if cookie, err = strconv.ParseUint(strings.TrimPrefix(v, "0x"), 16, 64); err != nil {
				return 0, fmt.Errorf("dump-flows line %q: %v", line, err)
			}
		}
		if !pipeline.Cookie(cookie).Learned() {
			n++
		}
	}
	return n, nil
}

// --- a small parser of the Prometheus text format (what promhttp writes) ---

type labels map[string]string

type sample struct {
	name   string
	labels labels
	value  float64
}

type metrics []sample

func parseMetrics(t *testing.T, text string) metrics {
	t.Helper()
	var out metrics
	for _, line := range strings.Split(text, "\n") {
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		s, err := parseSample(line)
		if err != nil {
			t.Fatalf("metrics line %q: %v", line, err)
		}
		out = append(out, s)
	}
	return out
}

func parseSample(line string) (sample, error) {
	i := strings.LastIndexByte(line, ' ')
	if i < 0 {
		return sample{}, fmt.Errorf("no value")
	}
	v, err := strconv.ParseFloat(line[i+1:], 64)
	if err != nil {
		return sample{}, err
	}
	s := sample{value: v, labels: labels{}}
	head := line[:i]
	name, rest, ok := strings.Cut(head, "{")
	s.name = name
	if !ok {
		return s, nil
	}
	rest = strings.TrimSuffix(rest, "}")
	for rest != "" {
		key, after, ok := strings.Cut(rest, `="`)
		if !ok {
			return sample{}, fmt.Errorf("label without value in %q", rest)
		}
		var val strings.Builder
		j := 0
		for ; j < len(after) && after[j] != '"'; j++ {
			if after[j] == '\\' && j+1 < len(after) {
				j++
			}
			val.WriteByte(after[j])
		}
		s.labels[key] = val.String()
		rest = strings.TrimPrefix(after[min(j+1, len(after)):], ",")
	}
	return s, nil
}

func (m metrics) matching(name string, want labels) []sample {
	var out []sample
next:
	for _, s := range m {
		if s.name != name {
			continue
		}
		for k, v := range want {
			if s.labels[k] != v {
				continue next
			}
		}
		out = append(out, s)
	}
	return out
}

// sum adds the values of the series of name whose labels include want.
func (m metrics) sum(name string, want labels) float64 {
	total := 0.0
	for _, s := range m.matching(name, want) {
		total += s.value
	}
	return total
}

func (m metrics) has(name string, want ...labels) bool {
	var l labels
	if len(want) > 0 {
		l = want[0]
	}
	return len(m.matching(name, l)) > 0
}

// byLabel maps one label's values to the series' values.
func (m metrics) byLabel(name, label string) map[string]float64 {
	out := map[string]float64{}
	for _, s := range m.matching(name, nil) {
		out[s.labels[label]] += s.value
	}
	return out
}
