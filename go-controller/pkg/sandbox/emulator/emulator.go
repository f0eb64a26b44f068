// Package emulator stands in for kubelet and a container runtime on one sandbox node. It
// registers the Node and keeps its Lease and Ready condition fresh (Ready follows the CNI
// network's readiness, as with kubelet), and for every Pod bound to the node creates a
// network namespace, calls the node's CNI plugin through libcni exactly as a runtime does,
// starts a responder on the pod's container ports inside the namespace, and reports the
// pod's IPs and readiness in its status.
package emulator

import (
	"context"
	"fmt"
	"sync"
	"time"

	log "github.com/sirupsen/logrus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"

	"github.com/kovs-net/kovs/go-controller/pkg/sandbox/relay"
)

// Config describes the node being emulated.
type Config struct {
	NodeName string
	// NodeIPs are the node's underlay addresses, primary family first.
	NodeIPs []string
	// Zone, if set, is the node's topology.kubernetes.io/zone label, which it gets when
	// it registers (as a kubelet started with --node-labels does).
	Zone string
	// NodeNetNSPath is the node's network namespace ("host network").
	NodeNetNSPath string
	// PodNetNS names the network namespace of a pod on this node from its UID.
	PodNetNS func(uid string) string
	// PodNetNSPrefix starts the names of all pod namespaces of this node (for GC).
	PodNetNSPrefix string
	CNIConfDir     string
	CNIBinDir      string
	CNICacheDir    string
	// Forwards make kube-apiserver and kovs-controller, which listen on the root
	// namespace's loopback, reachable on the node's loopback.
	Forwards []relay.Forward
	Workers  int
}

// Emulator is one node's kubelet and container runtime.
type Emulator struct {
	cfg      Config
	client   kubernetes.Interface
	network  *Runtime
	pods     corelisters.PodLister
	queue    workqueue.TypedRateLimitingInterface[string]
	recorder record.EventRecorder
	log      *log.Entry

	mu        sync.Mutex
	sandboxes map[string]*podSandbox // by namespace/name
}

// New builds an emulator for cfg.
func New(cfg Config, client kubernetes.Interface) *Emulator {
	if cfg.Workers == 0 {
		cfg.Workers = 4
	}
	return &Emulator{
		cfg:     cfg,
		client:  client,
		network: NewRuntime(cfg.CNIConfDir, cfg.CNIBinDir, cfg.CNICacheDir, cfg.NodeNetNSPath),
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(
			workqueue.NewTypedItemExponentialFailureRateLimiter[string](200*time.Millisecond, 10*time.Second),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: "pods"}),
		log:       log.WithField("node", cfg.NodeName),
		sandboxes: map[string]*podSandbox{},
	}
}

// Run emulates the node until ctx ends.
func (e *Emulator) Run(ctx context.Context) error {
	broadcaster := record.NewBroadcaster(record.WithContext(ctx))
	broadcaster.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: e.client.CoreV1().Events("")})
	defer broadcaster.Shutdown()
	e.recorder = broadcaster.NewRecorder(scheme.Scheme, corev1.EventSource{Component: "kubelet", Host: e.cfg.NodeName})

	fwdErr := make(chan error, len(e.cfg.Forwards))
	for _, fwd := range e.cfg.Forwards {
		go func() { fwdErr <- fwd.Run(ctx, e.cfg.NodeNetNSPath) }()
	}

	e.network.refresh(ctx)
	if err := e.register(ctx); err != nil {
		return err
	}
	factory := informers.NewSharedInformerFactoryWithOptions(e.client, 10*time.Minute,
		informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.FieldSelector = fields.OneTermEqualSelector("spec.nodeName", e.cfg.NodeName).String()
		}))
	informer := factory.Core().V1().Pods()
	e.pods = informer.Lister()
	if _, err := informer.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    e.enqueue,
		UpdateFunc: func(_, obj interface{}) { e.enqueue(obj) },
		DeleteFunc: e.enqueue,
	}); err != nil {
		return err
	}
	factory.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), informer.Informer().HasSynced) {
		return fmt.Errorf("pod informer did not sync")
	}
	defer e.queue.ShutDown()
	for i := 0; i < e.cfg.Workers; i++ {
		go e.worker(ctx)
	}
	e.log.Info("node emulator running")
	return e.loop(ctx, fwdErr)
}

// loop runs the periodic duties: network readiness, status and lease heartbeats, GC.
func (e *Emulator) loop(ctx context.Context, fwdErr <-chan error) error {
	netTick := time.NewTicker(time.Second)
	beat := time.NewTicker(heartbeatPeriod)
	gcTick := time.NewTicker(30 * time.Second)
	defer netTick.Stop()
	defer beat.Stop()
	defer gcTick.Stop()
	e.heartbeat(ctx)
	e.garbageCollect(ctx)
	for {
		select {
		case <-ctx.Done():
			e.closeResponders()
			return nil
		case err := <-fwdErr:
			if err != nil {
				return err
			}
		case <-netTick.C:
			if e.network.refresh(ctx) {
				_, err := e.network.ready()
				e.log.WithField("ready", err == nil).Info("network readiness changed")
				e.heartbeat(ctx)
				e.enqueueAll()
			}
		case <-beat.C:
			e.heartbeat(ctx)
		case <-gcTick.C:
			e.garbageCollect(ctx)
		}
	}
}

func (e *Emulator) heartbeat(ctx context.Context) {
	if err := e.updateNodeStatus(ctx); err != nil {
		e.log.WithError(err).Warn("update node status")
	}
	if err := e.renewLease(ctx); err != nil {
		e.log.WithError(err).Warn("renew node lease")
	}
}

func (e *Emulator) enqueue(obj interface{}) {
	key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj)
	if err == nil {
		e.queue.Add(key)
	}
}

func (e *Emulator) enqueueAll() {
	pods, _ := e.pods.List(labels.Everything())
	for _, p := range pods {
		e.enqueue(p)
	}
}

func (e *Emulator) worker(ctx context.Context) {
	for {
		key, quit := e.queue.Get()
		if quit {
			return
		}
		if err := e.reconcile(ctx, key); err != nil {
			e.log.WithError(err).WithField("pod", key).Warn("pod sync failed, will retry")
			e.queue.AddRateLimited(key)
		} else {
			e.queue.Forget(key)
		}
		e.queue.Done(key)
	}
}
