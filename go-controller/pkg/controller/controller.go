// Package controller is kovs-controller: one active replica (leader election on a Lease)
// that turns Nodes and Pods into node subnets and pod addresses, compiles NetworkPolicy
// into per-node shares, streams each share to its node's agent and records on every
// policy how far it is enforced.
package controller

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"

	log "github.com/sirupsen/logrus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/client-go/tools/record"
	"sigs.k8s.io/network-policy-api/pkg/client/clientset/versioned"

	"github.com/kovs-net/kovs/go-controller/pkg/audit"
	"github.com/kovs-net/kovs/go-controller/pkg/controller/addresses"
	"github.com/kovs-net/kovs/go-controller/pkg/controller/cachetrim"
	"github.com/kovs-net/kovs/go-controller/pkg/controller/metrics"
	"github.com/kovs-net/kovs/go-controller/pkg/controller/receipts"
	"github.com/kovs-net/kovs/go-controller/pkg/reconcile"
)

const podsByNodeIndex = "spec.nodeName"

// Config configures kovs-controller.
type Config struct {
	Addresses addresses.Config
	// LeaderElect turns on leader election (on the Lease LeaseNamespace/LeaseName).
	LeaderElect    bool
	LeaseNamespace string
	LeaseName      string
	Identity       string
	// Pod is the controller's own pod: the leader labels it with LeaderLabel.
	Pod OwnPod
	// LeaseDuration, RenewDeadline and RetryPeriod tune leader election (defaults 15 s,
	// 10 s, 2 s, as kube-controller-manager's).
	LeaseDuration, RenewDeadline, RetryPeriod time.Duration
	Workers                                   int
	Policy                                    PolicyConfig
	// Metrics and Health, if set, are kept up to date (see package metrics).
	Metrics *metrics.Set
	Health  *metrics.Health
	// Dynamic reaches the Egress resource; nil: Egress is not served.
	Dynamic dynamic.Interface
	// PolicyAPI is the client of sigs.k8s.io/network-policy-api (ClusterNetworkPolicy);
	// nil: ClusterNetworkPolicy is not followed.
	PolicyAPI versioned.Interface
	// Receipts, if set, records when the NetworkPolicy and Pod informers received each
	// version, and when each generation was written to a node's stream (--debug-receipts).
	Receipts *receipts.Ring
}

// The leader election timings when Config leaves them unset: kube-controller-manager's.
const (
	DefaultLeaseDuration = 15 * time.Second
	DefaultRenewDeadline = 10 * time.Second
	DefaultRetryPeriod   = 2 * time.Second
)

func (c *Config) electionDefaults() {
	if c.LeaseDuration == 0 {
		c.LeaseDuration, c.RenewDeadline, c.RetryPeriod = DefaultLeaseDuration, DefaultRenewDeadline, DefaultRetryPeriod
	}
}

// Run runs the controller until ctx ends: with leader election, only while leading.
func Run(ctx context.Context, cfg Config, client kubernetes.Interface) error {
	obs := observer{cfg.Metrics, cfg.Health}
	obs.electing()
	if !cfg.LeaderElect {
		obs.live(nil)
		obs.leading(true)
		cfg.electionDefaults()
		go labelAsLeader(ctx, client, cfg.Pod, cfg.RetryPeriod)
		return runControllers(ctx, cfg, client)
	}
	unlabel(client, cfg.Pod)
	if cfg.Identity == "" {
		cfg.Identity = defaultIdentity(cfg.Pod)
	}
	lock := &resourcelock.LeaseLock{
		LeaseMeta:  metav1.ObjectMeta{Namespace: cfg.LeaseNamespace, Name: cfg.LeaseName},
		Client:     client.CoordinationV1(),
		LockConfig: resourcelock.ResourceLockConfig{Identity: cfg.Identity},
	}
	cfg.electionDefaults()
	watchdog := leaderelection.NewLeaderHealthzAdaptor(cfg.LeaseDuration)
	obs.live(watchdog.Check)
	// client-go releases the Lease as soon as the election's context ends, without waiting
	// for OnStartedLeading to return: a successor could then start while this replica's
	// reconcilers still write addresses it does not see. So the election runs on a
	// context of its own, ended only once the controllers have stopped.
	electCtx, endElection := context.WithCancel(context.WithoutCancel(ctx))
	defer endElection()
	var mu sync.Mutex
	leading := false
	stopElection := context.AfterFunc(ctx, func() {
		mu.Lock()
		defer mu.Unlock()
		if !leading {
			endElection() // not leading: nothing runs that a successor could race
		}
	})
	defer stopElection()
	errc := make(chan error, 1)
	elector, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
		Lock:            lock,
		ReleaseOnCancel: true,
		LeaseDuration:   cfg.LeaseDuration,
		RenewDeadline:   cfg.RenewDeadline,
		RetryPeriod:     cfg.RetryPeriod,
		WatchDog:        watchdog,
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: func(leadCtx context.Context) {
				mu.Lock()
				leading = true
				mu.Unlock()
				// The controllers stop when the replica stops or the lead is lost; only
				// then may the Lease be released.
				runCtx, stop := context.WithCancel(leadCtx)
				defer context.AfterFunc(ctx, stop)()
				log.WithField("identity", cfg.Identity).Info("leading: starting controllers")
				obs.leading(true)
				go labelAsLeader(runCtx, client, cfg.Pod, cfg.RetryPeriod)
				// A failure of the controllers (a refused address plan) ends the election
				// too, releasing the Lease, and Run returns it: the process exits instead
				// of leading idle.
				errc <- runControllers(runCtx, cfg, client)
				stop()
				mu.Lock()
				leading = false
				mu.Unlock()
				endElection()
			},
			OnStoppedLeading: func() {
				obs.leading(false)
				unlabel(client, cfg.Pod)
				log.WithField("identity", cfg.Identity).Info("stopped leading")
			},
		},
	})
	if err != nil {
		// client-go's own checks of the timings (RunOrDie would panic on them).
		return fmt.Errorf("leader election (lease duration %s, renew deadline %s, retry period %s): %w",
			cfg.LeaseDuration, cfg.RenewDeadline, cfg.RetryPeriod, err)
	}
	watchdog.SetLeaderElection(elector)
	elector.Run(electCtx)
	select {
	case err := <-errc:
		return err
	default:
		return ctx.Err()
	}
}

// defaultIdentity names this replica in the Lease: its pod's name (or the host's), made
// unique by a random suffix as kube-controller-manager's. hostname_pid is not unique: the
// replicas run on the host network, so pods on nodes that share a hostname (or a UTS
// namespace, as the sandbox's do) and are each PID 1 of their container would both hold
// the Lease under one identity and both allocate.
func defaultIdentity(pod OwnPod) string {
	name := pod.Name
	if name == "" {
		name, _ = os.Hostname()
	}
	return name + "_" + string(uuid.NewUUID())
}

func runControllers(ctx context.Context, cfg Config, client kubernetes.Interface) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	obs := observer{cfg.Metrics, cfg.Health}
	alloc, err := addresses.NewAllocator(cfg.Addresses)
	if err != nil {
		return err
	}
	broadcaster := record.NewBroadcaster(record.WithContext(ctx))
	broadcaster.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: client.CoreV1().Events("")})
	defer broadcaster.Shutdown()
	recorder := broadcaster.NewRecorder(scheme.Scheme, corev1.EventSource{Component: "kovs-controller"})

	factory := cachetrim.NewSharedInformerFactory(client, 0)
	nodeInformer := factory.Core().V1().Nodes()
	podInformer := factory.Core().V1().Pods()
	if err := podInformer.Informer().AddIndexers(cache.Indexers{podsByNodeIndex: podNodeIndex}); err != nil {
		return err
	}
	pods := &addresses.PodReconciler{Pods: podInformer.Lister(), Bandwidth: &addresses.BandwidthWarnings{Recorder: recorder}}
	podCtl := reconcile.New(reconcile.Options{Name: "pod-bandwidth", Workers: cfg.Workers, Metrics: obs.reconcile()}, pods, podInformer.Informer().HasSynced)
	nodes := &addresses.NodeReconciler{Alloc: alloc, Client: client, Nodes: nodeInformer.Lister(), Recorder: recorder}
	nodeCtl := reconcile.New(reconcile.Options{Name: "node-subnets", Workers: 1, Metrics: obs.reconcile()}, nodes, nodeInformer.Informer().HasSynced)
	if cfg.Receipts != nil {
		cfg.Policy.Sent = cfg.Receipts.RecordSent
	}
	policies, err := newPolicyControllers(factory, client, recorder, cfg.Policy, obs)
	if err != nil {
		return err
	}

	if err := watchAuditAnnotations(factory.Core().V1().Namespaces().Informer(), recorder, audit.NamespaceVerdicts); err != nil {
		return err
	}
	if cfg.Receipts != nil {
		if _, err := factory.Networking().V1().NetworkPolicies().Informer().AddEventHandler(cfg.Receipts.Handler("NetworkPolicy")); err != nil {
			return err
		}
		if _, err := podInformer.Informer().AddEventHandler(cfg.Receipts.Handler("Pod")); err != nil {
			return err
		}
	}
	if cfg.PolicyAPI != nil && clusterPoliciesServed(cfg.PolicyAPI) {
		// No share goes out without the cluster rules (served later: they come as a change).
		policies.compiler.ExpectClusterRules()
	}
	factory.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), nodeInformer.Informer().HasSynced, podInformer.Informer().HasSynced) {
		return fmt.Errorf("informers did not sync")
	}
	if err := checkAddressPlan(ctx, client, cfg.Addresses.ClusterCIDRs, nodeInformer.Lister()); err != nil {
		return err
	}
	if err := alloc.Restore(nodeInformer.Lister()); err != nil {
		return err
	}
	defer obs.addresses(alloc)()
	// Handlers only after the rebuild, so no reconcile sees a half-restored allocator.
	if _, err := nodeInformer.Informer().AddEventHandler(nodeCtl.Handler()); err != nil {
		return err
	}
	if _, err := podInformer.Informer().AddEventHandler(podCtl.Handler()); err != nil {
		return err
	}
	go func() {
		for _, ok := range factory.WaitForCacheSync(ctx.Done()) {
			if !ok {
				return
			}
		}
		obs.synced()
	}()
	return runAll(ctx, cancel, map[string]func(context.Context) error{
		"node subnets":  nodeCtl.Run,
		"pod bandwidth": podCtl.Run,
		"network policy": func(ctx context.Context) error {
			return policies.run(ctx, client, nodeInformer.Informer())
		},
		"egress": func(ctx context.Context) error { return runEgress(ctx, cfg, client) },
		"cluster network policy": func(ctx context.Context) error {
			return runClusterPolicies(ctx, cfg.PolicyAPI, recorder, obs, factory, policies.compiler, policies.realization.Tracker(),
				cfg.Policy.ClusterMinSyncInterval)
		},
	})
}

// runAll runs every part until ctx ends or one of them fails, which stops the others;
// it returns the first failure.
func runAll(ctx context.Context, cancel context.CancelFunc, parts map[string]func(context.Context) error) error {
	type result struct {
		name string
		err  error
	}
	results := make(chan result, len(parts))
	for name, run := range parts {
		go func() { results <- result{name, run(ctx)} }()
	}
	var first error
	for range parts {
		r := <-results
		if r.err == nil && ctx.Err() == nil {
			r.err = errors.New("stopped on its own")
		}
		if r.err != nil && first == nil && ctx.Err() == nil {
			first = fmt.Errorf("%s: %w", r.name, r.err)
			log.WithError(r.err).WithField("part", r.name).Error("controller part failed, stopping")
		}
		cancel()
	}
	return first
}

func podNodeIndex(obj interface{}) ([]string, error) {
	pod, ok := obj.(*corev1.Pod)
	if !ok || pod.Spec.NodeName == "" {
		return nil, nil
	}
	return []string{pod.Spec.NodeName}, nil
}

func enqueuePodsOf(indexer cache.Indexer, ctl *reconcile.Controller, node string) {
	objs, _ := indexer.ByIndex(podsByNodeIndex, node)
	for _, o := range objs {
		ctl.EnqueueObject(o)
	}
}
