package harness

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	pmodel "github.com/prometheus/common/model"
	log "github.com/sirupsen/logrus"
)

// AllocationSize is the pod address allocation benchmark's default (RunAllocation): 2,000
// pods on 100 nodes in 10 namespaces, no policies.
func AllocationSize() Config {
	c := FullSize()
	c.Nodes, c.PodsPerNode, c.Namespaces, c.PoliciesPerNS = 100, 20, 10, 0
	c.PodChurnPerSecond, c.PolicyChurnPerSec, c.ChurnDuration, c.SpanProbes, c.FanOutProbes = 0, 0, 0, 0, 0
	c.ChurnSteps, c.Failover = nil, false
	c.ConvergenceTimeout = 10 * time.Minute
	return c
}

// AllocationResult is one run of RunAllocation.
type AllocationResult struct {
	Nodes, Pods int
	// Created is the first pod Create call to the last one returned; Allocated the first
	// Create call to the last pod's address seen.
	Created, Allocated time.Duration
	// Latency is each pod's Create call to its kovs.io/pod-network seen by the harness's
	// informer; Pending the pods still without one at the timeout.
	Latency Durations
	Pending int
	// Phase is the CPU of every process while the pods were created and allocated.
	Phase PhaseUsage
	// Audit counts kovs-controller's requests in that phase.
	Audit AuditCounts
	// Reconciles is what kovs-controller's /metrics say of its pod-addresses workers
	// after the run (mean Reconcile time, mean queue wait).
	Reconciles ReconcileStats
}

// PodsPerSecond is the allocated pods per second of Allocated.
func (r *AllocationResult) PodsPerSecond() float64 {
	if r.Allocated <= 0 {
		return 0
	}
	return float64(len(r.Latency)) / r.Allocated.Seconds()
}

// ReconcileStats sums one reconcile controller's histograms, as /metrics reads at one
// moment (since kovs-controller started) or between two reads (Sub).
type ReconcileStats struct {
	Reconciles, Waits             uint64
	ReconcileSeconds, WaitSeconds float64
}

// MeanReconcile is the mean time of one Reconcile call.
func (s ReconcileStats) MeanReconcile() time.Duration {
	return meanSeconds(s.ReconcileSeconds, s.Reconciles)
}

// MeanWait is the mean time a key waited in the queue for a worker.
func (s ReconcileStats) MeanWait() time.Duration { return meanSeconds(s.WaitSeconds, s.Waits) }

// Sub is what happened between an earlier read and s.
func (s ReconcileStats) Sub(earlier ReconcileStats) ReconcileStats {
	return ReconcileStats{Reconciles: s.Reconciles - earlier.Reconciles, Waits: s.Waits - earlier.Waits,
		ReconcileSeconds: s.ReconcileSeconds - earlier.ReconcileSeconds, WaitSeconds: s.WaitSeconds - earlier.WaitSeconds}
}

func meanSeconds(total float64, count uint64) time.Duration {
	if count == 0 {
		return 0
	}
	return time.Duration(total / float64(count) * float64(time.Second))
}

// RunAllocation is the pod address allocation benchmark: it registers cfg.Nodes hollow
// nodes and waits for their blocks, creates the namespaces, then cfg.Pods() pods bound to
// uniformly drawn nodes, as fast as cfg.CreateConcurrency writers get them accepted, and
// waits until the harness's informer has seen every pod's kovs.io/pod-network (or
// cfg.ConvergenceTimeout passed). The hollow kubelets report the pods Running as their
// addresses come (their status writes share kube-apiserver with the allocation, as real
// kubelets' do). No agents and no policies: only the address side of the controller.
func (h *Harness) RunAllocation(ctx context.Context) (*AllocationResult, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer func() { cancel(); h.kubelets.queue.ShutDown(); h.wg.Wait() }()
	log.SetLevel(log.ErrorLevel)
	h.startInformers(ctx)
	if err := h.registerNodes(ctx); err != nil {
		return nil, fmt.Errorf("nodes: %w", err)
	}
	spaces := h.model.spaces
	if err := h.createNamespaces(ctx, new(writeCount)); err != nil {
		return nil, err
	}
	res := &AllocationResult{Nodes: h.cfg.Nodes, Pods: h.cfg.Pods()}
	mark := h.procs.mark("pods")
	start := time.Now()
	err := h.parallel(ctx, h.cfg.Pods(), func(ctx context.Context, i int) error {
		return h.createPod(ctx, podRef{spaces[i%len(spaces)], fmt.Sprintf("pod-%d", i/len(spaces))}, 1)
	})
	res.Created = time.Since(start)
	if err != nil {
		return nil, fmt.Errorf("pods: %w", err)
	}
	waitErr := h.waitAddresses(ctx)
	res.Phase = h.procs.since(mark)
	res.Latency, res.Pending, _ = h.alloc.results()
	res.Allocated = h.alloc.lastAllocation().Sub(start)
	if res.Audit, err = readAudit(h.layout.KovsAuditLog(), []PhaseUsage{res.Phase}); err != nil {
		h.logf("audit log: %v", err)
	}
	if res.Reconciles, err = h.reconcileStats(ctx, "pod-bandwidth"); err != nil {
		h.logf("kovs-controller metrics: %v", err)
	}
	return res, waitErr
}

// waitAddresses waits until every pod the harness created has its address allocated.
func (h *Harness) waitAddresses(ctx context.Context) error {
	return waitUntil(ctx, h.cfg.ConvergenceTimeout, 50*time.Millisecond, "every pod's address", func() error {
		if n := h.alloc.waiting(); n > 0 {
			return fmt.Errorf("%d pods have no address yet", n)
		}
		return nil
	})
}

// reconcileStats reads kovs-controller's reconcile histograms of one controller.
func (h *Harness) reconcileStats(ctx context.Context, controller string) (ReconcileStats, error) {
	var s ReconcileStats
	families, err := h.controllerMetrics(ctx)
	if err != nil {
		return s, err
	}
	sum := func(name string) (float64, uint64) {
		var total float64
		var count uint64
		for _, m := range families[name].GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "controller" && l.GetValue() == controller {
					total += m.GetHistogram().GetSampleSum()
					count += m.GetHistogram().GetSampleCount()
				}
			}
		}
		return total, count
	}
	s.ReconcileSeconds, s.Reconciles = sum("kovs_reconcile_duration_seconds")
	s.WaitSeconds, s.Waits = sum("kovs_reconcile_queue_wait_seconds")
	return s, nil
}

// controllerMetrics reads kovs-controller's /metrics.
func (h *Harness) controllerMetrics(ctx context.Context) (map[string]*dto.MetricFamily, error) {
	body, err := h.controllerGet(ctx, "/metrics")
	if err != nil {
		return nil, err
	}
	return parseFamilies(body, "kovs-controller")
}

// parseFamilies reads the /metrics text of who.
func parseFamilies(body []byte, who string) (map[string]*dto.MetricFamily, error) {
	parser := expfmt.NewTextParser(pmodel.UTF8Validation)
	families, err := parser.TextToMetricFamilies(bytes.NewReader(body))
	if err != nil {
		return nil, fmt.Errorf("%s's /metrics: %w", who, err)
	}
	return families, nil
}

// controllerGet reads path from the leading kovs-controller's metrics listener.
func (h *Harness) controllerGet(ctx context.Context, path string) ([]byte, error) {
	return h.getFrom(ctx, int(h.controllerPort.Load()), path)
}

// getFrom reads path from a kovs-controller metrics listener on loopback port.
func (h *Harness) getFrom(ctx context.Context, port int, path string) ([]byte, error) {
	url := "http://" + net.JoinHostPort("127.0.0.1", strconv.Itoa(port)) + path
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s: %s", url, resp.Status)
	}
	return body, nil
}
