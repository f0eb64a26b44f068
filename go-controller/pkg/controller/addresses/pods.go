package addresses

import (
	"context"
	"errors"
	"fmt"

	log "github.com/sirupsen/logrus"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"

	"github.com/kovs-net/kovs/go-controller/pkg/controller/ipam"
)

// ReasonAddressExhausted is the Event reason when a node's block has no free address.
const ReasonAddressExhausted = "PodAddressExhausted"

// PodReconciler gives each scheduled pod its addresses and MAC.
type PodReconciler struct {
	Alloc    *Allocator
	Client   kubernetes.Interface
	Pods     corelisters.PodLister
	Recorder record.EventRecorder
	// Bandwidth reports unusable bandwidth annotations (nil: not checked).
	Bandwidth *BandwidthWarnings
}

// NeedsAddresses reports whether kovs must give the pod addresses: scheduled, not
// hostNetwork, not finished, and not being deleted (a pod with a deletionTimestamp is
// never started, or is being stopped: it keeps what it holds, see keepsAddresses, but
// gets no new ones).
func NeedsAddresses(pod *corev1.Pod) bool {
	return keepsAddresses(pod) && pod.DeletionTimestamp == nil
}

// keepsAddresses reports whether the pod holds on to addresses it has: scheduled, not
// hostNetwork, not finished. A terminating pod keeps them until it is gone (its sandbox
// may still run with them); a pod's addresses are released as soon as it finishes.
func keepsAddresses(pod *corev1.Pod) bool {
	return pod.Spec.NodeName != "" && !pod.Spec.HostNetwork &&
		pod.Status.Phase != corev1.PodSucceeded && pod.Status.Phase != corev1.PodFailed
}

// Reconcile allocates addresses for a pod that needs them and records them on the Pod; it
// releases them when the pod is gone, finished, or replaced by a new pod of the same name.
func (r *PodReconciler) Reconcile(ctx context.Context, key string) error {
	ns, name, err := cache.SplitMetaNamespaceKey(key)
	if err != nil {
		return nil
	}
	pod, err := r.Pods.Pods(ns).Get(name)
	if apierrors.IsNotFound(err) {
		r.release(key, "deleted")
		if r.Bandwidth != nil {
			r.Bandwidth.Forget(key)
		}
		return nil
	}
	if err != nil {
		return err
	}
	if r.Bandwidth != nil && NeedsAddresses(pod) {
		r.Bandwidth.Check(pod)
	}
	if uid, ok := r.Alloc.ownerOf(key); ok && uid != string(pod.UID) {
		r.release(key, "replaced by a new pod of the same name")
	}
	if !keepsAddresses(pod) {
		if pod.Spec.NodeName != "" && !pod.Spec.HostNetwork {
			r.release(key, "finished")
		}
		return nil
	}
	if !NeedsAddresses(pod) {
		return nil // being deleted: released once it is gone
	}
	addrs, err := r.Alloc.allocatePod(key, string(pod.UID), pod.Spec.NodeName)
	var notReady errNodeNotReady
	if errors.As(err, &notReady) {
		return nil // the node reconciler re-enqueues the node's pods once its pools exist
	}
	if err != nil {
		if errors.Is(err, ipam.ErrExhausted) {
			r.Recorder.Event(pod, corev1.EventTypeWarning, ReasonAddressExhausted, err.Error())
		}
		return fmt.Errorf("allocate addresses for pod %s: %w", key, err)
	}
	if err := r.recordHighWater(ctx, pod.Spec.NodeName); err != nil {
		return err
	}
	return r.annotate(ctx, pod, addrs)
}

func (r *PodReconciler) annotate(ctx context.Context, pod *corev1.Pod, addrs []ipam.PodAddress) error {
	network, err := ipam.NewPodNetwork(addrs)
	if err != nil {
		return err
	}
	network.UID = string(pod.UID)
	value, err := network.Annotation()
	if err != nil {
		return err
	}
	if pod.Annotations[ipam.PodNetworkAnnotationKey] == value {
		return nil
	}
	err = patchAnnotations(ctx, r.Client.CoreV1().Pods(pod.Namespace), pod.Name, map[string]string{ipam.PodNetworkAnnotationKey: value})
	if apierrors.IsNotFound(err) {
		r.release(pod.Namespace+"/"+pod.Name, "deleted")
		return nil
	}
	if err != nil {
		return fmt.Errorf("record addresses on pod %s/%s: %w", pod.Namespace, pod.Name, err)
	}
	log.WithField("pod", pod.Namespace+"/"+pod.Name).WithField("node", pod.Spec.NodeName).
		WithField("network", value).Debug("pod addresses assigned")
	return nil
}

func (r *PodReconciler) release(key, why string) {
	if ips := r.Alloc.releasePod(key); len(ips) > 0 {
		log.WithField("pod", key).WithField("ips", ips).WithField("why", why).Debug("pod addresses released")
	}
}
