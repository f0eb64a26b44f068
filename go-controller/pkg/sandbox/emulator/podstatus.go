package emulator

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// Pod condition reasons, as kubelet writes them.
const (
	reasonNetworkNotReady    = "NetworkNotReady"
	reasonContainerCreating  = "ContainerCreating"
	reasonContainersNotReady = "ContainersNotReady"
)

// reportRunning writes phase Running, the pod's IPs and Ready, if the status says otherwise.
func (e *Emulator) reportRunning(ctx context.Context, pod *corev1.Pod, sb *podSandbox) error {
	status := pod.Status.DeepCopy()
	now := metav1.Now()
	status.Phase = corev1.PodRunning
	status.Reason, status.Message = "", ""
	e.setHostIPs(status)
	status.PodIP = sb.ips[0]
	status.PodIPs = nil
	for _, ip := range sb.ips {
		status.PodIPs = append(status.PodIPs, corev1.PodIP{IP: ip})
	}
	if status.StartTime == nil {
		status.StartTime = &now
	}
	for _, t := range []corev1.PodConditionType{corev1.PodScheduled, corev1.PodReadyToStartContainers,
		corev1.PodInitialized, corev1.ContainersReady, corev1.PodReady} {
		setCondition(status, corev1.PodCondition{Type: t, Status: corev1.ConditionTrue}, now)
	}
	status.ContainerStatuses = containerStatuses(pod, func(c corev1.Container) corev1.ContainerStatus {
		started := status.StartTime
		return corev1.ContainerStatus{Name: c.Name, Image: c.Image, ImageID: c.Image,
			ContainerID: runtimeName + "://" + containerID(pod.UID)[:12] + "-" + c.Name,
			Ready:       true, Started: ptr.To(true),
			State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: *started}}}
	})
	return e.writeStatus(ctx, pod, status)
}

// reportNetworkNotReady leaves the pod Pending with kubelet's reason and an Event, so
// `kubectl describe pod` says why it is not running.
func (e *Emulator) reportNetworkNotReady(ctx context.Context, pod *corev1.Pod, cause error) error {
	msg := "network is not ready: " + notReadyMessage(cause)
	e.recorder.Event(pod, corev1.EventTypeWarning, reasonNetworkNotReady, msg)
	status := pod.Status.DeepCopy()
	now := metav1.Now()
	status.Phase = corev1.PodPending
	e.setHostIPs(status)
	setCondition(status, corev1.PodCondition{Type: corev1.PodScheduled, Status: corev1.ConditionTrue}, now)
	setCondition(status, corev1.PodCondition{Type: corev1.PodReadyToStartContainers, Status: corev1.ConditionFalse,
		Reason: reasonNetworkNotReady, Message: msg}, now)
	for _, t := range []corev1.PodConditionType{corev1.ContainersReady, corev1.PodReady} {
		setCondition(status, corev1.PodCondition{Type: t, Status: corev1.ConditionFalse,
			Reason: reasonContainersNotReady, Message: msg}, now)
	}
	status.ContainerStatuses = containerStatuses(pod, func(c corev1.Container) corev1.ContainerStatus {
		return corev1.ContainerStatus{Name: c.Name, Image: c.Image, State: corev1.ContainerState{
			Waiting: &corev1.ContainerStateWaiting{Reason: reasonContainerCreating}}}
	})
	return e.writeStatus(ctx, pod, status)
}

func (e *Emulator) setHostIPs(status *corev1.PodStatus) {
	status.HostIP = e.cfg.NodeIPs[0]
	status.HostIPs = nil
	for _, ip := range e.cfg.NodeIPs {
		status.HostIPs = append(status.HostIPs, corev1.HostIP{IP: ip})
	}
}

// writeStatus updates the pod's status only when it changed (ignoring timestamps).
func (e *Emulator) writeStatus(ctx context.Context, pod *corev1.Pod, status *corev1.PodStatus) error {
	if statusEqual(&pod.Status, status) {
		return nil
	}
	updated := pod.DeepCopy()
	updated.Status = *status
	_, err := e.client.CoreV1().Pods(pod.Namespace).UpdateStatus(ctx, updated, metav1.UpdateOptions{})
	if err != nil {
		return fmt.Errorf("update status of %s/%s: %w", pod.Namespace, pod.Name, err)
	}
	return nil
}

func statusEqual(a, b *corev1.PodStatus) bool {
	strip := func(s *corev1.PodStatus) *corev1.PodStatus {
		c := s.DeepCopy()
		for i := range c.Conditions {
			c.Conditions[i].LastProbeTime = metav1.Time{}
			c.Conditions[i].LastTransitionTime = metav1.Time{}
		}
		return c
	}
	return apiequality.Semantic.DeepEqual(strip(a), strip(b))
}

// setCondition sets a condition, keeping its transition time if the status is unchanged.
func setCondition(status *corev1.PodStatus, c corev1.PodCondition, now metav1.Time) {
	c.LastTransitionTime = now
	for i, old := range status.Conditions {
		if old.Type == c.Type {
			if old.Status == c.Status {
				c.LastTransitionTime = old.LastTransitionTime
			}
			status.Conditions[i] = c
			return
		}
	}
	status.Conditions = append(status.Conditions, c)
}

func containerStatuses(pod *corev1.Pod, status func(corev1.Container) corev1.ContainerStatus) []corev1.ContainerStatus {
	out := make([]corev1.ContainerStatus, 0, len(pod.Spec.Containers))
	for _, c := range pod.Spec.Containers {
		out = append(out, status(c))
	}
	return out
}
