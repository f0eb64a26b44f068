package framework

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"time"

	"github.com/kovs-net/kovs/go-controller/pkg/sandbox"
)

// APIServerMetric is the sum of the series of metric name on kube-apiserver's /metrics
// whose labels include want (read with the sandbox's admin credentials; 0 when there is
// no such series).
func (s *Sandbox) APIServerMetric(ctx context.Context, name string, want map[string]string) (float64, error) {
	b, err := s.Client.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		return 0, fmt.Errorf("kube-apiserver /metrics: %w", err)
	}
	total, err := sumSeries(b, name, want)
	if err != nil {
		return 0, fmt.Errorf("kube-apiserver /metrics: %w", err)
	}
	return total, nil
}

// metricsClient reads the replicas' /metrics: bounded, whatever ctx allows.
var metricsClient = &http.Client{Timeout: 5 * time.Second}

// ControllerMetric is the sum of the series of metric name on the /metrics of every
// kovs-controller replica whose labels include want (0 when there is no such series).
func (s *Sandbox) ControllerMetric(ctx context.Context, name string, want map[string]string) (float64, error) {
	st, err := s.Layout.LoadState()
	if err != nil {
		return 0, err
	}
	total := 0.0
	for _, r := range sandbox.ControllerReplicas(*st) {
		url := "http://" + net.JoinHostPort("127.0.0.1", strconv.Itoa(r.MetricsPort)) + "/metrics"
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return 0, err
		}
		resp, err := metricsClient.Do(req)
		if err != nil {
			return 0, fmt.Errorf("%s /metrics: %w", r.Process, err)
		}
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil || resp.StatusCode != http.StatusOK {
			return 0, fmt.Errorf("%s /metrics: %s %v", r.Process, resp.Status, err)
		}
		n, err := sumSeries(b, name, want)
		if err != nil {
			return 0, fmt.Errorf("%s /metrics: %w", r.Process, err)
		}
		total += n
	}
	return total, nil
}
