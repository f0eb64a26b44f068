package harness

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"sync"
	"time"

	log "github.com/sirupsen/logrus"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/ptr"

	"github.com/kovs-net/kovs/go-controller/pkg/agent/podaddr"
	"github.com/kovs-net/kovs/go-controller/pkg/controller/ipam"
)

// hollowKubelets do for every simulated node what kubemark's hollow kubelet does: register
// the Node with its address, capacity and Ready condition, create its Lease in
// kube-node-lease (renewed only if Config.LeaseRenewInterval asks), and report its pods
// Running with their addresses. The addresses come from what a node's CNI ADD does: the
// node's own allocator, kovs-agent's (package agent/podaddr, over the node's
// kovs.io/node-subnets blocks, its high water kept in memory), with no API request on the
// way. Graceful deletions are completed (delete with
// grace 0) as kubelet does once the containers stopped, and the pod's addresses released
// as its CNI DEL does. One shared pod informer serves every node (a real kubelet watches
// its own node's pods).
type hollowKubelets struct {
	client kubernetes.Interface
	pods   corelisters.PodLister
	nodes  corelisters.NodeLister
	queue  workqueue.TypedRateLimitingInterface[podRef]
	// allocated is told when a pod got its addresses (the CNI ADD's allocation) and when
	// its node was handed the pod.
	allocated func(ref podRef, delivered, at time.Time)

	mu     sync.Mutex
	nodeIP map[string]string
	leases map[string]*coordinationv1.Lease
	books  map[string]*podaddr.Book // by node
}

func newHollowKubelets(client kubernetes.Interface, pods corelisters.PodLister, nodes corelisters.NodeLister,
	allocated func(ref podRef, delivered, at time.Time)) *hollowKubelets {
	return &hollowKubelets{client: client, pods: pods, nodes: nodes, allocated: allocated, nodeIP: map[string]string{},
		leases: map[string]*coordinationv1.Lease{}, books: map[string]*podaddr.Book{},
		queue: workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[podRef]())}
}

// memoryHighWater is a hollow node's high-water store: its agent never restarts.
type memoryHighWater struct{}

func (memoryHighWater) RecordHighWater(context.Context, ipam.HighWater) error { return nil }

// book returns the node's allocator, opened once the Node has its blocks.
func (k *hollowKubelets) book(node string) (*podaddr.Book, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if b, ok := k.books[node]; ok {
		return b, nil
	}
	n, err := k.nodes.Get(node)
	if err != nil {
		return nil, err
	}
	value, ok := n.Annotations[ipam.NodeSubnetsAnnotationKey]
	if !ok {
		return nil, fmt.Errorf("node %s has no blocks yet", node)
	}
	ann, err := ipam.ParseNodeSubnetsAnnotation(value)
	if err != nil {
		return nil, err
	}
	b, err := podaddr.New(node, ann.Blocks(), ipam.PoolOptions{Quarantine: 30 * time.Second}, memoryHighWater{}, "--ipv4-block-size")
	if err != nil {
		return nil, err
	}
	k.books[node] = b
	return b, nil
}

// allocate gives the pod its addresses on its node, as the node's CNI ADD does; the first
// time, it reports the allocation. It is called when the pod informer delivers the pod
// (each node allocates on its own, as real nodes do, not behind the shared workers' status
// writes) and again by the pod's sync, which then finds them.
func (k *hollowKubelets) allocate(ctx context.Context, pod *corev1.Pod) ([]ipam.PodAddress, error) {
	delivered := time.Now()
	book, err := k.book(pod.Spec.NodeName)
	if err != nil {
		return nil, err
	}
	held := len(book.Lookup(string(pod.UID))) > 0
	addrs, err := book.Allocate(ctx, string(pod.UID))
	if err != nil {
		return nil, err
	}
	if !held && k.allocated != nil {
		k.allocated(podRef{pod.Namespace, pod.Name}, delivered, time.Now())
	}
	return addrs, nil
}

// admit is the pod informer's handler on a node's side: a new pod of a hollow node gets
// its addresses at once (its sandbox's CNI ADD); the status is written by the workers.
func (k *hollowKubelets) admit(ctx context.Context, pod *corev1.Pod) {
	k.mu.Lock()
	_, ours := k.nodeIP[pod.Spec.NodeName]
	k.mu.Unlock()
	if ours && pod.DeletionTimestamp == nil && len(pod.Status.PodIPs) == 0 {
		_, _ = k.allocate(ctx, pod) // a node without blocks yet: the sync retries
	}
	k.enqueue(pod)
}

// release frees a deleted pod's addresses (its CNI DEL).
func (k *hollowKubelets) release(pod *corev1.Pod) {
	k.mu.Lock()
	b := k.books[pod.Spec.NodeName]
	k.mu.Unlock()
	if b != nil {
		b.Release(string(pod.UID))
	}
}

// hollowKubeletUser is the identity the hollow kubelets' client impersonates. Its group
// system:nodes is what matters: kube-apiserver's priority and fairness puts kubelets'
// requests in the node-high and system priority levels by it, where the admin kubeconfig
// (system:masters) would be exempt and, at thousands of Lease renewals per second, leave
// every other client (kovs-controller's leader Lease among them) the CPU the exempt
// requests do not take.
var hollowKubeletUser = rest.ImpersonationConfig{UserName: "kovs-scale:hollow-kubelets",
	Groups: []string{"system:nodes", "system:authenticated"}}

// bindHollowKubelets lets hollowKubeletUser do what the harness's kubelets and informers
// do. The binding is to cluster-admin: it only authorizes; the priority level comes from
// the group. The user name is not system:node:<name>, so the Node authorizer leaves the
// decision to RBAC.
func bindHollowKubelets(ctx context.Context, admin kubernetes.Interface) error {
	binding := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "kovs-scale-hollow-kubelets"},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "cluster-admin"},
		Subjects: []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: hollowKubeletUser.UserName}}}
	err := retryWrite(ctx, func() error {
		_, err := admin.RbacV1().ClusterRoleBindings().Create(ctx, binding, metav1.CreateOptions{})
		return err
	})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("bind the hollow kubelets' identity %s: %w", hollowKubeletUser.UserName, err)
	}
	return nil
}

// nodeAddress is node i's InternalIP: 172.16.0.0/12 has room for every node of a run.
func nodeAddress(i int) string {
	return netip.AddrFrom4([4]byte{172, byte(16 + i>>16), byte(i >> 8), byte(i)}).String()
}

// register creates the Node, posts its status and its first Lease, each write retried
// while kube-apiserver is overloaded.
func (k *hollowKubelets) register(ctx context.Context, i int) error {
	name, ip := nodeName(i), nodeAddress(i)
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{
		corev1.LabelHostname: name, corev1.LabelOSStable: "linux", corev1.LabelArchStable: "amd64", labelWorkload: "true"}}}
	err := retryWrite(ctx, func() error {
		_, err := k.client.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{})
		return err
	})
	if err != nil {
		return fmt.Errorf("register node %s: %w", name, err)
	}
	if err := retryWrite(ctx, func() error { return k.postNodeStatus(ctx, name, ip) }); err != nil {
		return err
	}
	k.mu.Lock()
	k.nodeIP[name] = ip
	k.mu.Unlock()
	return retryWrite(ctx, func() error { return k.renewLease(ctx, name) })
}

// postNodeStatus patches the node's status as kubelet does (a strategic merge: the
// conditions other components own, NetworkUnavailable, stay).
func (k *hollowKubelets) postNodeStatus(ctx context.Context, name, ip string) error {
	now := metav1.Now()
	capacity := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("8"),
		corev1.ResourceMemory: resource.MustParse("16Gi"), corev1.ResourcePods: resource.MustParse("110")}
	status := corev1.NodeStatus{Capacity: capacity, Allocatable: capacity,
		Addresses: []corev1.NodeAddress{{Type: corev1.NodeHostName, Address: name}, {Type: corev1.NodeInternalIP, Address: ip}},
		NodeInfo: corev1.NodeSystemInfo{KubeletVersion: "v1.37.2", OperatingSystem: "linux", Architecture: "amd64",
			ContainerRuntimeVersion: "kovs-scale://v1.37.2"},
		Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady",
			Message: "kubelet is posting ready status", LastHeartbeatTime: now, LastTransitionTime: now}}}
	patch, err := json.Marshal(map[string]any{"status": status})
	if err != nil {
		return err
	}
	if _, err := k.client.CoreV1().Nodes().PatchStatus(ctx, name, patch); err != nil {
		return fmt.Errorf("status of node %s: %w", name, err)
	}
	return nil
}

// renewLease keeps the node's Lease fresh, as kubelet's heartbeat does: one Update of the
// Lease it last wrote.
func (k *hollowKubelets) renewLease(ctx context.Context, node string) error {
	leases := k.client.CoordinationV1().Leases(corev1.NamespaceNodeLease)
	now := metav1.NewMicroTime(time.Now())
	k.mu.Lock()
	lease := k.leases[node]
	k.mu.Unlock()
	var err error
	if lease == nil {
		lease, err = leases.Create(ctx, &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: node, Namespace: corev1.NamespaceNodeLease},
			Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To(node), LeaseDurationSeconds: ptr.To(int32(40)), RenewTime: &now}},
			metav1.CreateOptions{})
	} else {
		lease = lease.DeepCopy()
		lease.Spec.RenewTime = &now
		lease, err = leases.Update(ctx, lease, metav1.UpdateOptions{})
	}
	if err != nil {
		k.mu.Lock()
		delete(k.leases, node) // read it again next time
		k.mu.Unlock()
		if apierrors.IsAlreadyExists(err) || apierrors.IsConflict(err) {
			lease, err = leases.Get(ctx, node, metav1.GetOptions{})
		}
		if err != nil {
			return fmt.Errorf("lease of node %s: %w", node, err)
		}
	}
	k.mu.Lock()
	k.leases[node] = lease
	k.mu.Unlock()
	return nil
}

// heartbeat renews every node's Lease once per interval, spread evenly over it.
func (k *hollowKubelets) heartbeat(ctx context.Context, nodes []string, interval time.Duration) {
	tick := time.NewTicker(interval / time.Duration(len(nodes)))
	defer tick.Stop()
	for i := 0; ; i = (i + 1) % len(nodes) {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		go func(node string) {
			if err := k.renewLease(ctx, node); err != nil && ctx.Err() == nil {
				log.WithError(err).WithField("node", node).Warn("hollow kubelet: lease renewal failed")
			}
		}(nodes[i])
	}
}

// enqueue is the pod informer's handler.
func (k *hollowKubelets) enqueue(pod *corev1.Pod) {
	k.queue.Add(podRef{pod.Namespace, pod.Name})
}

// work runs pod syncs until the queue shuts down.
func (k *hollowKubelets) work(ctx context.Context) {
	for {
		ref, quit := k.queue.Get()
		if quit {
			return
		}
		if err := k.syncPod(ctx, ref); err != nil && ctx.Err() == nil {
			log.WithError(err).WithField("pod", ref).Debug("hollow kubelet: pod sync failed, retrying")
			k.queue.AddRateLimited(ref)
		} else {
			k.queue.Forget(ref)
		}
		k.queue.Done(ref)
	}
}

func (k *hollowKubelets) syncPod(ctx context.Context, ref podRef) error {
	pod, err := k.pods.Pods(ref.Namespace).Get(ref.Name)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	k.mu.Lock()
	hostIP, ours := k.nodeIP[pod.Spec.NodeName]
	k.mu.Unlock()
	if !ours {
		return nil
	}
	if pod.DeletionTimestamp != nil {
		err := k.client.CoreV1().Pods(pod.Namespace).Delete(ctx, pod.Name, metav1.DeleteOptions{
			GracePeriodSeconds: ptr.To(int64(0)), Preconditions: &metav1.Preconditions{UID: &pod.UID}})
		if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
			return nil
		}
		return err
	}
	addrs, err := k.allocate(ctx, pod)
	if err != nil {
		return err // the node's agent waits for its blocks too
	}
	ips := make([]netip.Addr, 0, len(addrs))
	for _, a := range addrs {
		ips = append(ips, a.Address.Addr())
	}
	return k.reportRunning(ctx, pod, hostIP, ips)
}

// reportRunning writes phase Running, the pod's IPs and Ready, unless the status says so.
func (k *hollowKubelets) reportRunning(ctx context.Context, pod *corev1.Pod, hostIP string, ips []netip.Addr) error {
	if pod.Status.Phase == corev1.PodRunning && len(pod.Status.PodIPs) == len(ips) && pod.Status.PodIP == ips[0].String() {
		return nil
	}
	now := metav1.Now()
	updated := pod.DeepCopy()
	st := &updated.Status
	st.Phase, st.HostIP, st.HostIPs = corev1.PodRunning, hostIP, []corev1.HostIP{{IP: hostIP}}
	st.PodIP, st.PodIPs = ips[0].String(), nil
	for _, ip := range ips {
		st.PodIPs = append(st.PodIPs, corev1.PodIP{IP: ip.String()})
	}
	st.StartTime = &now
	st.Conditions = nil
	for _, t := range []corev1.PodConditionType{corev1.PodScheduled, corev1.PodReadyToStartContainers,
		corev1.PodInitialized, corev1.ContainersReady, corev1.PodReady} {
		st.Conditions = append(st.Conditions, corev1.PodCondition{Type: t, Status: corev1.ConditionTrue, LastTransitionTime: now})
	}
	st.ContainerStatuses = []corev1.ContainerStatus{{Name: "pause", Image: pauseImage, ImageID: pauseImage, Ready: true,
		Started: ptr.To(true), State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: now}}}}
	_, err := k.client.CoreV1().Pods(pod.Namespace).UpdateStatus(ctx, updated, metav1.UpdateOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}
