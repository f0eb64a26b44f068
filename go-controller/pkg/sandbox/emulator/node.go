package emulator

import (
	"context"
	"fmt"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
)

const (
	kubeletVersion  = "v1.37.2"
	leaseDuration   = 40 * time.Second
	heartbeatPeriod = 10 * time.Second
	nodeLeaseNS     = corev1.NamespaceNodeLease
	kubeletReadyMsg = "kubelet is posting ready status"
	kubeletReady    = "KubeletReady"
	kubeletNotReady = "KubeletNotReady"
	runtimeName     = "kovs-sandbox"
	emulatedCPU     = "8"
	emulatedMemory  = "16Gi"
	emulatedMaxPods = "110"
)

// register creates the Node the way kubelet does (or adopts an existing one).
func (e *Emulator) register(ctx context.Context) error {
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{
		Name: e.cfg.NodeName,
		Labels: map[string]string{
			corev1.LabelHostname:   e.cfg.NodeName,
			corev1.LabelOSStable:   "linux",
			corev1.LabelArchStable: "amd64",
		},
	}}
	if e.cfg.Zone != "" {
		node.Labels[corev1.LabelTopologyZone] = e.cfg.Zone
	}
	_, err := e.client.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("register node %s: %w", e.cfg.NodeName, err)
	}
	return e.updateNodeStatus(ctx)
}

// updateNodeStatus posts addresses, capacity and the Ready condition, which follows the
// network plugin's readiness exactly as kubelet's does.
func (e *Emulator) updateNodeStatus(ctx context.Context) error {
	return retry.RetryOnConflict(retry.DefaultRetry, func() error { return e.tryUpdateNodeStatus(ctx) })
}

func (e *Emulator) tryUpdateNodeStatus(ctx context.Context) error {
	node, err := e.client.CoreV1().Nodes().Get(ctx, e.cfg.NodeName, metav1.GetOptions{})
	if err != nil {
		return err
	}
	now := metav1.Now()
	capacity := corev1.ResourceList{
		corev1.ResourceCPU:    resource.MustParse(emulatedCPU),
		corev1.ResourceMemory: resource.MustParse(emulatedMemory),
		corev1.ResourcePods:   resource.MustParse(emulatedMaxPods),
	}
	node.Status.Capacity, node.Status.Allocatable = capacity, capacity
	node.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeHostName, Address: e.cfg.NodeName}}
	for _, ip := range e.cfg.NodeIPs {
		node.Status.Addresses = append(node.Status.Addresses, corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: ip})
	}
	node.Status.NodeInfo = corev1.NodeSystemInfo{KubeletVersion: kubeletVersion, OperatingSystem: "linux",
		Architecture: "amd64", ContainerRuntimeVersion: runtimeName + "://" + kubeletVersion}
	ready := corev1.NodeCondition{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: kubeletReady, Message: kubeletReadyMsg}
	if _, nerr := e.network.ready(); nerr != nil {
		ready = corev1.NodeCondition{Type: corev1.NodeReady, Status: corev1.ConditionFalse, Reason: kubeletNotReady, Message: notReadyMessage(nerr)}
	}
	conds := []corev1.NodeCondition{ready}
	for _, t := range []corev1.NodeConditionType{corev1.NodeMemoryPressure, corev1.NodeDiskPressure, corev1.NodePIDPressure} {
		conds = append(conds, corev1.NodeCondition{Type: t, Status: corev1.ConditionFalse, Reason: "KubeletHasNo" + string(t)})
	}
	for i := range conds {
		conds[i].LastHeartbeatTime = now
		conds[i].LastTransitionTime = transitionTime(node.Status.Conditions, conds[i], now)
	}
	node.Status.Conditions = mergeConditions(node.Status.Conditions, conds)
	_, err = e.client.CoreV1().Nodes().UpdateStatus(ctx, node, metav1.UpdateOptions{})
	return err
}

// transitionTime keeps the previous transition time unless the status changed.
func transitionTime(old []corev1.NodeCondition, c corev1.NodeCondition, now metav1.Time) metav1.Time {
	for _, o := range old {
		if o.Type == c.Type && o.Status == c.Status {
			return o.LastTransitionTime
		}
	}
	return now
}

// mergeConditions replaces ours and keeps conditions other components own
// (NetworkUnavailable belongs to the network plugin).
func mergeConditions(old, ours []corev1.NodeCondition) []corev1.NodeCondition {
	owned := map[corev1.NodeConditionType]bool{}
	for _, c := range ours {
		owned[c.Type] = true
	}
	out := ours
	for _, c := range old {
		if !owned[c.Type] {
			out = append(out, c)
		}
	}
	return out
}

// renewLease keeps the node's Lease in kube-node-lease fresh, as kubelet's heartbeat does.
func (e *Emulator) renewLease(ctx context.Context) error {
	leases := e.client.CoordinationV1().Leases(nodeLeaseNS)
	now := metav1.NewMicroTime(time.Now())
	lease, err := leases.Get(ctx, e.cfg.NodeName, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		lease = &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: e.cfg.NodeName, Namespace: nodeLeaseNS},
			Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To(e.cfg.NodeName),
				LeaseDurationSeconds: ptr.To(int32(leaseDuration.Seconds())), RenewTime: &now}}
		_, err = leases.Create(ctx, lease, metav1.CreateOptions{})
		return err
	}
	if err != nil {
		return err
	}
	lease.Spec.RenewTime = &now
	_, err = leases.Update(ctx, lease, metav1.UpdateOptions{})
	return err
}
