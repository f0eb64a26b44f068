package addresses

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
)

// PodReconciler checks each scheduled pod's bandwidth annotations and reports unusable
// ones. It writes nothing on the Pod: a pod's addresses are its node agent's.
type PodReconciler struct {
	Pods      corelisters.PodLister
	Bandwidth *BandwidthWarnings
}

// Reconcile checks a pod that will run on a node with kovs's network.
func (r *PodReconciler) Reconcile(_ context.Context, key string) error {
	ns, name, err := cache.SplitMetaNamespaceKey(key)
	if err != nil {
		return nil
	}
	pod, err := r.Pods.Pods(ns).Get(name)
	if apierrors.IsNotFound(err) {
		r.Bandwidth.Forget(key)
		return nil
	}
	if err != nil {
		return err
	}
	if pod.Spec.NodeName != "" && !pod.Spec.HostNetwork && pod.DeletionTimestamp == nil &&
		pod.Status.Phase != corev1.PodSucceeded && pod.Status.Phase != corev1.PodFailed {
		r.Bandwidth.Check(pod)
	}
	return nil
}
