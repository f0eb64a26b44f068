package harness

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	log "github.com/sirupsen/logrus"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/kovs-net/kovs/go-controller/pkg/sandbox"
)

// kubeletWorkers are the hollow kubelets' pod status and deletion writers, shared by all
// nodes: each waits on a kube-apiserver round trip, so they bound how fast pods start and
// graceful deletions complete.
const kubeletWorkers = 64

// Harness drives one run against a sandbox in scale mode.
type Harness struct {
	cfg    Config
	layout sandbox.Layout
	state  *sandbox.State
	logf   func(format string, args ...any)

	// Separate clients (separate connections and rate limits) for the workload's writes,
	// the hollow kubelets and the simulated agents.
	workload, kubelet, agent kubernetes.Interface
	factory                  informers.SharedInformerFactory

	model       *model
	kubelets    *hollowKubelets
	realization *realizationTracker
	alloc       *allocationTracker
	addresses   podAddresses
	// controllerPort is the metrics port of the kovs-controller replica that leads.
	controllerPort atomic.Int64
	// churnPolicies are the churn's live policies, kept from one churn to the next.
	churnPolicies policyQueue
	procs         *procSampler

	nodes    []string
	nodeUIDs map[string]types.UID
	agents   map[string]*Agent
	wg       sync.WaitGroup

	result Result
}

// New prepares a run of cfg against the scale-mode sandbox of layout; logf receives
// progress lines.
func New(cfg Config, layout sandbox.Layout, logf func(string, ...any)) (*Harness, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	state, err := layout.LoadState()
	if err != nil {
		return nil, err
	}
	h := &Harness{cfg: cfg, layout: layout, state: state, logf: logf, nodeUIDs: map[string]types.UID{},
		agents: map[string]*Agent{}, realization: newRealizationTracker(cfg.RealizationDeadline), alloc: newAllocationTracker()}
	h.controllerPort.Store(int64(state.MetricsPort))
	for _, c := range []*kubernetes.Interface{&h.workload, &h.agent} {
		if *c, err = h.client(nil); err != nil {
			return nil, err
		}
	}
	if err := bindHollowKubelets(context.Background(), h.workload); err != nil {
		return nil, err
	}
	if h.kubelet, err = h.client(&hollowKubeletUser); err != nil {
		return nil, err
	}
	for i := range cfg.Nodes {
		h.nodes = append(h.nodes, nodeName(i))
	}
	spaces := make([]string, cfg.Namespaces)
	for i := range spaces {
		spaces[i] = namespaceName(i)
	}
	h.model = newModel(h.nodes, spaces, cfg.Seed)
	h.procs = newProcSampler(layout)
	h.result.Config = cfg
	return h, nil
}

// client is a clientset of the admin kubeconfig on a connection of its own, with rate
// limits that do not throttle the harness below what it must write; as, if set, is the
// identity it impersonates.
func (h *Harness) client(as *rest.ImpersonationConfig) (kubernetes.Interface, error) {
	cfg, err := clientcmd.BuildConfigFromFlags("", h.layout.Kubeconfig())
	if err != nil {
		return nil, err
	}
	if as != nil {
		cfg.Impersonate = *as
	}
	cfg.QPS, cfg.Burst = 5000, 10000
	cfg.UserAgent = "kovs-scale-harness"
	// A Dial of its own keeps client-go from sharing one cached transport between the
	// clientsets.
	cfg.Dial = (&net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}).DialContext
	return kubernetes.NewForConfig(cfg)
}

// Run runs every phase and returns the measurements. The simulated nodes and agents stop
// when ctx ends.
func (h *Harness) Run(ctx context.Context) (*Result, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer func() { cancel(); h.kubelets.queue.ShutDown(); h.wg.Wait() }()
	log.SetLevel(log.ErrorLevel) // thousands of stream clients log every reconnect
	h.startInformers(ctx)
	if err := h.findLeader(ctx); err != nil {
		h.result.Failure = err.Error()
		return &h.result, err
	}
	phases := []struct {
		name string
		run  func(context.Context) error
	}{
		{"nodes", h.registerNodes},
		{"agents", h.startAgents},
		{"workload", h.createWorkload},
		{"first convergence", h.waitFirstConvergence},
		{"span probes", h.probeSpans},
		{"fan-out", h.fanOut},
		{"churn", h.churn},
		{"final convergence", h.verifyFinal},
		{"churn steps", h.churnSteps},
		{"failover", h.failover},
	}
	api := h.apiserverMark(ctx)
	for _, p := range phases {
		h.logf("phase %s", p.name)
		mark := h.procs.mark(p.name)
		err := p.run(ctx)
		h.result.Phases = append(h.result.Phases, h.procs.since(mark))
		api = h.apiserverPhase(ctx, p.name, api)
		if err != nil {
			err = fmt.Errorf("phase %s: %w", p.name, err)
			h.result.Failure = err.Error()
			h.finish()
			return &h.result, err
		}
	}
	h.finish()
	return &h.result, nil
}

// finish adds the whole run's process usage and the audit log's counts to the result,
// for a failed run as for a complete one.
func (h *Harness) finish() {
	h.result.Processes = h.procs.totals()
	audit, err := readAudit(h.layout.KovsAuditLog(), h.result.Phases)
	if err != nil {
		h.logf("audit log: %v", err)
	}
	h.result.Audit = audit
}

// apiserverReading is kube-apiserver's /metrics read at a phase boundary, or why it could
// not be.
type apiserverReading struct {
	at      time.Time
	metrics APIServerMetrics
	err     error
}

// until is what kube-apiserver counted between the reading r and the later one end.
func (r apiserverReading) until(end apiserverReading) (APIServerMetrics, error) {
	if err := errors.Join(r.err, end.err); err != nil {
		return APIServerMetrics{}, err
	}
	return end.metrics.Sub(r.metrics)
}

func (h *Harness) apiserverMark(ctx context.Context) apiserverReading {
	m, err := apiserverMetrics(ctx, h.workload)
	return apiserverReading{at: time.Now(), metrics: m, err: err}
}

// apiserverPhase reads kube-apiserver's /metrics at the end of the phase that began at
// start and adds what it counted in between to the result; it returns the new reading,
// the next phase's start.
func (h *Harness) apiserverPhase(ctx context.Context, name string, start apiserverReading) apiserverReading {
	end := h.apiserverMark(ctx)
	d, err := start.until(end)
	if err == nil {
		h.result.APIServer = append(h.result.APIServer, APIServerPhase{Name: name, Seconds: end.at.Sub(start.at).Seconds(), Metrics: d})
	} else {
		h.logf("kube-apiserver's metrics for phase %s: %v", name, err)
	}
	return end
}

func (h *Harness) startInformers(ctx context.Context) {
	h.factory = informers.NewSharedInformerFactory(h.kubelet, 0)
	pods := h.factory.Core().V1().Pods()
	nodes := h.factory.Core().V1().Nodes()
	h.kubelets = newHollowKubelets(h.kubelet, pods.Lister(), nodes.Lister(), h.alloc.allocated)
	onPod := func(obj any) {
		if pod, ok := obj.(*corev1.Pod); ok {
			h.addresses.observe(pod)
			h.kubelets.admit(ctx, pod)
		}
	}
	_, _ = pods.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: onPod,
		UpdateFunc: func(_, obj any) { onPod(obj) },
		DeleteFunc: func(obj any) {
			if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = d.Obj
			}
			if pod, ok := obj.(*corev1.Pod); ok {
				h.kubelets.release(pod)
			}
		}})
	// Registered before Start: the listers compare() and the hollow kubelets read.
	nodes.Informer()
	h.factory.Core().V1().Namespaces().Informer()
	_, _ = h.factory.Networking().V1().NetworkPolicies().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { h.policySeen(obj, true) },
		DeleteFunc: func(obj any) { h.policySeen(obj, false) },
	})
	h.factory.Start(ctx.Done())
	h.factory.WaitForCacheSync(ctx.Done())
	for range kubeletWorkers {
		h.wg.Go(func() { h.kubelets.work(ctx) })
	}
}

// policySeen tells the realization tracker that the harness's watch delivered a policy's
// creation or deletion.
func (h *Harness) policySeen(obj any, created bool) {
	if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = tomb.Obj
	}
	if np, ok := obj.(*networkingv1.NetworkPolicy); ok {
		h.realization.seen(policyKey{np.Namespace, np.Name}, created, time.Now())
	}
}

// sortedAgents returns the agents in node order.
func (h *Harness) sortedAgents() []*Agent {
	out := make([]*Agent, 0, len(h.agents))
	for _, n := range h.nodes {
		if a, ok := h.agents[n]; ok {
			out = append(out, a)
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].node < out[j].node })
	return out
}

// waitUntil polls check every interval until it returns nil, the timeout passes or ctx
// ends.
func waitUntil(ctx context.Context, timeout, interval time.Duration, what string, check func() error) error {
	deadline := time.Now().Add(timeout)
	for {
		err := check()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("timed out after %s waiting for %s: %w", timeout, what, err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(interval):
		}
	}
}
