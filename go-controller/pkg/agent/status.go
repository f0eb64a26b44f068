package agent

import (
	"context"
	"encoding/json"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// readiness is the agent's answer to "can pods be set up now?".
type readiness struct {
	mu  sync.Mutex
	err error
}

func (r *readiness) set(err error) {
	r.mu.Lock()
	r.err = err
	r.mu.Unlock()
}

func (r *readiness) get() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.err
}

// markNetworkAvailable sets the Node's NetworkUnavailable condition to False: the node is
// programmed and its pods can reach the cluster.
func (a *Agent) markNetworkAvailable(ctx context.Context) error {
	now := metav1.NewTime(time.Now())
	cond := corev1.NodeCondition{Type: corev1.NodeNetworkUnavailable, Status: corev1.ConditionFalse,
		Reason: "KovsAgentReady", Message: "kovs-agent programmed br-int", LastTransitionTime: now, LastHeartbeatTime: now}
	patch, err := json.Marshal(map[string]any{"status": map[string]any{"conditions": []corev1.NodeCondition{cond}}})
	if err != nil {
		return err
	}
	_, err = a.client.CoreV1().Nodes().PatchStatus(ctx, a.cfg.NodeName, patch)
	return err
}
