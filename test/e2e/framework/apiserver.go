package framework

import (
	"context"
	"fmt"
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
