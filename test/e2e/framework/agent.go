package framework

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/kovs-net/kovs/go-controller/pkg/nodestatus"
	"github.com/kovs-net/kovs/go-controller/pkg/sandbox"
)

// AgentGet fetches path ("/metrics", "/status") from the kovs-agent of node, which
// listens on the loopback of the node's network namespace.
func (s *Sandbox) AgentGet(node, path string) ([]byte, error) {
	st, err := s.Layout.LoadState()
	if err != nil {
		return nil, err
	}
	if st.AgentMetricsPort == 0 {
		return nil, fmt.Errorf("the sandbox recorded no agent metrics port (kovs not running?)")
	}
	netns := sandbox.NetNSPath(s.Layout.NodeNetNS(node))
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DisableKeepAlives: true,
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			var conn net.Conn
			// The socket keeps the namespace it was made in.
			err := ns.WithNetNSPath(netns, func(ns.NetNS) error {
				var err error
				conn, err = (&net.Dialer{}).DialContext(ctx, network, addr)
				return err
			})
			return conn, err
		}}}
	url := "http://" + net.JoinHostPort("127.0.0.1", strconv.Itoa(st.AgentMetricsPort)) + path
	resp, err := client.Get(url)
	if err != nil {
		return nil, fmt.Errorf("%s agent %s: %w", node, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("%s agent %s: %w", node, path, err)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s agent %s: %s: %s", node, path, resp.Status, bytes.TrimSpace(b))
	}
	return b, nil
}

// AgentMetric is the sum of the series of metric name on node's agent whose labels
// include want (a counter or gauge; 0 when there is no such series).
func (s *Sandbox) AgentMetric(node, name string, want map[string]string) (float64, error) {
	b, err := s.AgentGet(node, "/metrics")
	if err != nil {
		return 0, err
	}
	total, err := sumSeries(b, name, want)
	if err != nil {
		return 0, fmt.Errorf("%s agent /metrics: %w", node, err)
	}
	return total, nil
}

// sumSeries is the sum of the series of metric name in the Prometheus text exposition b
// whose labels include want (counters and gauges; 0 when there is no such series).
func sumSeries(b []byte, name string, want map[string]string) (float64, error) {
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(bytes.NewReader(b))
	if err != nil {
		return 0, err
	}
	total := 0.0
	if f, ok := families[name]; ok {
		for _, m := range f.Metric {
			if hasLabels(m, want) {
				total += m.GetCounter().GetValue() + m.GetGauge().GetValue()
			}
		}
	}
	return total, nil
}

func hasLabels(m *dto.Metric, want map[string]string) bool {
	got := map[string]string{}
	for _, l := range m.Label {
		got[l.GetName()] = l.GetValue()
	}
	for k, v := range want {
		if got[k] != v {
			return false
		}
	}
	return true
}

// AgentPolicy is the NetworkPolicy part of an agent's /status (the JSON the agent serves
// for kovsctl status): whether it has the controller's share, and how many rules it holds.
type AgentPolicy struct {
	Received           bool   `json:"received"`
	ReceivedGeneration uint64 `json:"receivedGeneration"`
	RealizedGeneration uint64 `json:"realizedGeneration"`
	Rules              int    `json:"rules"`
}

// AgentStatus reads node's agent's /status.
func (s *Sandbox) AgentStatus(node string) (nodestatus.Status, error) {
	var st nodestatus.Status
	b, err := s.AgentGet(node, "/status")
	if err != nil {
		return st, err
	}
	if err := json.Unmarshal(b, &st); err != nil {
		return st, fmt.Errorf("%s agent /status: %w", node, err)
	}
	return st, nil
}

// AgentPolicyStatus reads the policy part of node's agent's /status; an agent that
// enforces no NetworkPolicy is an error.
func (s *Sandbox) AgentPolicyStatus(node string) (AgentPolicy, error) {
	b, err := s.AgentGet(node, "/status")
	if err != nil {
		return AgentPolicy{}, err
	}
	var st struct {
		Policy *AgentPolicy `json:"policy"`
	}
	if err := json.Unmarshal(b, &st); err != nil {
		return AgentPolicy{}, fmt.Errorf("%s agent /status: %w", node, err)
	}
	if st.Policy == nil {
		return AgentPolicy{}, fmt.Errorf("%s agent /status: NetworkPolicy is not enforced on the node", node)
	}
	return *st.Policy, nil
}

// FullResyncs counts the successful full flow resyncs of node's agent so far
// (kovs_agent_flow_full_resyncs_total{result="success"}).
func (s *Sandbox) FullResyncs(node string) (float64, error) {
	return s.AgentMetric(node, "kovs_agent_flow_full_resyncs_total", map[string]string{"result": "success"})
}
