package controller

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	log "github.com/sirupsen/logrus"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
)

// LeaderLabel marks the pod of the replica that leads. The kovs-controller Service
// selects it, so agents that find the controller through the Service's EndpointSlices
// reach the replica that serves the policy stream, not a standby.
const LeaderLabel = "kovs.io/leader"

// OwnPod names the controller's own pod (from the downward API); empty outside a pod.
type OwnPod struct {
	Namespace, Name string
}

func (p OwnPod) set() bool { return p.Namespace != "" && p.Name != "" }

// markLeader sets (leading) or removes LeaderLabel on the controller's own pod. A
// replica clears it when it starts, so a container restarted in place does not keep the
// label it had as leader.
func markLeader(ctx context.Context, client kubernetes.Interface, pod OwnPod, leading bool) error {
	if !pod.set() {
		return nil
	}
	var value any // JSON null removes the label
	if leading {
		value = "true"
	}
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"labels": map[string]any{LeaderLabel: value}}})
	if err != nil {
		return err
	}
	if _, err := client.CoreV1().Pods(pod.Namespace).Patch(ctx, pod.Name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		return fmt.Errorf("label pod %s/%s %s=%v: %w", pod.Namespace, pod.Name, LeaderLabel, leading, err)
	}
	log.WithField("pod", pod.Namespace+"/"+pod.Name).WithField("leading", leading).Info("leader label updated")
	return nil
}

// labelAsLeader sets LeaderLabel, retrying every retry until it succeeds or ctx ends: the
// leader must stay findable even if the API refused the first patch.
func labelAsLeader(ctx context.Context, client kubernetes.Interface, pod OwnPod, retry time.Duration) {
	for {
		err := markLeader(ctx, client, pod, true)
		if err == nil || ctx.Err() != nil {
			return
		}
		log.WithError(err).WithField("retryIn", retry).Error("agents cannot find this leader until its pod is labelled")
		select {
		case <-ctx.Done():
			return
		case <-time.After(retry):
		}
	}
}

// unlabel removes LeaderLabel, on its own deadline (the run's context may be over).
func unlabel(client kubernetes.Interface, pod OwnPod) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := markLeader(ctx, client, pod, false); err != nil {
		log.WithError(err).Warn("leader label not removed")
	}
}
