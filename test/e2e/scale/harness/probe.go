package harness

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// settle is how long after a change's realization the harness keeps counting what the
// agents receive, so late deltas are charged to the change.
const settle = time.Second

// probeSpans makes isolated policy changes, one at a time with nothing else changing,
// and charges each agent the deltas it received for each: the span accounting. Every
// probe is a creation and then a deletion of a shape-(a) policy.
func (h *Harness) probeSpans(ctx context.Context) error {
	for i := range h.cfg.SpanProbes {
		sel := h.model.randomSelector()
		name := fmt.Sprintf("probe-%d", i)
		for _, create := range []bool{true, false} {
			samples, err := h.probe(ctx, name, sel, create)
			if err != nil {
				return err
			}
			h.result.SpanSamples = append(h.result.SpanSamples, samples...)
		}
	}
	h.result.ProbeLatency, h.result.ProbeLost, _ = h.realization.results()
	return nil
}

// probe makes one change and returns every agent's traffic for it with its span.
func (h *Harness) probe(ctx context.Context, name string, sel selector, create bool) ([]SpanSample, error) {
	spans := h.model.spans(sel)
	before := map[string]Traffic{}
	for _, a := range h.sortedAgents() {
		before[a.node] = a.traffic()
	}
	c, err := h.changePolicy(ctx, name, sel, create, spans)
	if err != nil {
		return nil, err
	}
	select {
	case <-c.done:
	case <-time.After(h.cfg.RealizationDeadline):
		h.realization.sweep(time.Now().Add(h.cfg.RealizationDeadline), h.model.hosts)
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	time.Sleep(settle)
	var out []SpanSample
	for _, a := range h.sortedAgents() {
		out = append(out, SpanSample{Span: spans[a.node], Traffic: a.traffic().Sub(before[a.node])})
	}
	return out, nil
}

// changePolicy creates or deletes the policy name over sel, registering the change with
// the realization tracker first; spans are the nodes it concerns.
func (h *Harness) changePolicy(ctx context.Context, name string, sel selector, create bool, spans map[string]int) (*policyChange, error) {
	key := policyKey{sel.Namespace, name}
	nodes := slices.Sorted(maps.Keys(spans))
	c := h.realization.expect(key, sel, create, nodes, func(node string) bool {
		a, ok := h.agents[node]
		return ok && a.hasPolicy(key)
	})
	nps := h.workload.NetworkingV1().NetworkPolicies(sel.Namespace)
	err := retryWrite(ctx, func() error {
		if create {
			_, err := nps.Create(ctx, policyObject(name, sel), metav1.CreateOptions{})
			return err
		}
		err := nps.Delete(ctx, name, metav1.DeleteOptions{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		return err
	})
	if err != nil {
		h.realization.cancel(c)
		return nil, fmt.Errorf("policy %s/%s: %w", sel.Namespace, name, err)
	}
	h.realization.answered(c, time.Now())
	return c, nil
}
