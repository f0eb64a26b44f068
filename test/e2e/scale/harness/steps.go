package harness

import (
	"context"
	"fmt"
	"math"
)

// ChurnStep is the churn at one rate of the steps phase.
type ChurnStep struct {
	// Factor scales the churn's rates to PodsPerSecond (creations, and as many deletions)
	// and PoliciesPerSecond.
	Factor                           float64
	PodsPerSecond, PoliciesPerSecond int
	Churn                            ChurnResult
	// APIServer is what kube-apiserver's /metrics counted over the step (every client);
	// APIServerErr why it could not be read.
	APIServer    APIServerMetrics
	APIServerErr string
}

// writesAboveSLO reports whether kube-apiserver's writes in the step had a p99 above
// their SLO.
func (s ChurnStep) writesAboveSLO() bool {
	w, err := s.APIServer.Writes()
	return s.APIServerErr == "" && err == nil && w.Count > 0 && w.Quantile(0.99) > writeSLO
}

// churnSteps churns at each of ChurnSteps' rates in turn, StepDuration each, and stops
// after the first step in which kube-apiserver's writes were above their SLO: kovs's
// figures at each load, up to where the end-to-end times stop measuring kovs.
func (h *Harness) churnSteps(ctx context.Context) error {
	for i, f := range h.cfg.ChurnSteps {
		step := ChurnStep{Factor: f,
			PodsPerSecond:     max(1, int(math.Round(f*float64(h.cfg.PodChurnPerSecond)))),
			PoliciesPerSecond: max(1, int(math.Round(f*float64(h.cfg.PolicyChurnPerSec))))}
		h.logf("churn step %d: x%g, %d pod creations and deletions and %d policy changes per second", i+1, f, step.PodsPerSecond, step.PoliciesPerSecond)
		start := h.apiserverMark(ctx)
		var err error
		step.Churn, err = h.churnAt(ctx, step.PodsPerSecond, step.PoliciesPerSecond, h.cfg.StepDuration, fmt.Sprintf("step%d", i+1))
		var apiErr error
		if step.APIServer, apiErr = start.until(h.apiserverMark(ctx)); apiErr != nil {
			step.APIServerErr = apiErr.Error()
		}
		h.result.Steps = append(h.result.Steps, step)
		if err != nil {
			return fmt.Errorf("step %d (x%g): %w", i+1, f, err)
		}
		if step.writesAboveSLO() {
			h.logf("kube-apiserver's writes above their SLO at x%g: no higher step", f)
			return nil
		}
	}
	return nil
}
