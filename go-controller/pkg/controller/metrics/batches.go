package metrics

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/kovs-net/kovs/go-controller/pkg/controller/networkpolicy"
)

// PolicyBatches measures the NetworkPolicy compiler's batches: how long a change waits
// for its batch, and how long a batch takes. With kovs_controller_policy_realization_seconds
// (a share's generation sent to realized) they split a change's time inside the controller.
type PolicyBatches struct {
	wait, took prometheus.Histogram
}

// NewPolicyBatches registers kovs_controller_policy_batch_wait_seconds and
// kovs_controller_policy_batch_seconds on reg.
func NewPolicyBatches(reg prometheus.Registerer) (*PolicyBatches, error) {
	b := &PolicyBatches{
		wait: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "kovs_controller_policy_batch_wait_seconds",
			Help:    "Time from the first change of a NetworkPolicy compile batch reaching the compiler (Namespace, Pod or NetworkPolicy event) to the batch starting.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 16)}),
		took: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "kovs_controller_policy_batch_seconds",
			Help:    "Time one NetworkPolicy compile batch takes, up to the nodes concerned being woken to send their deltas.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 16)}),
	}
	for _, h := range []prometheus.Collector{b.wait, b.took} {
		if err := reg.Register(h); err != nil {
			return nil, err
		}
	}
	return b, nil
}

// Observe records one batch (networkpolicy.Options.Observe).
func (b *PolicyBatches) Observe(batch networkpolicy.Batch) {
	b.wait.Observe(batch.Waited.Seconds())
	b.took.Observe(batch.Took.Seconds())
}
