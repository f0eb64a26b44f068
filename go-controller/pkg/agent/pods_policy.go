package agent

import (
	"context"
	"errors"

	log "github.com/sirupsen/logrus"

	"github.com/kovs-net/kovs/go-controller/pkg/cni"
	"github.com/kovs-net/kovs/go-controller/pkg/policy"
)

// waitForPolicy returns once kovs-controller's share for this node lists the pod (it has
// evaluated the pod: the share holds every policy that selects it) and the flows of that
// share are installed, bounded by ctx and policyWait. Until then the pod is pending: its
// port is closed both ways to all but its node, so no peer the policy denies ever reaches
// it. When policyWait runs out (kovs-controller is down or unreachable), it returns nil and
// the pod starts pending, closed: it opens when its policy arrives, and pods keep starting
// through a controller outage without ever being open before their policy is known. Only
// the ADD's own deadline (the runtime gave up) is an error. Without NetworkPolicy it
// returns at once.
func (p *PodPorts) waitForPolicy(parent context.Context, pod cni.PodRef) error {
	if !p.state.PolicyEnabled() {
		return nil
	}
	ctx := parent
	if p.policyWait > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(parent, p.policyWait)
		defer cancel()
	}
	err := p.awaitPolicy(ctx, pod)
	if err != nil && parent.Err() == nil && ctx.Err() != nil {
		log.WithField("pod", pod.String()).WithField("waited", p.policyWait).
			Warn("the pod's NetworkPolicy has not arrived from kovs-controller: the pod starts closed (pending) and opens when it arrives")
		return nil
	}
	return err
}

// awaitPolicy waits, bounded by ctx, until the share lists the pod and its flows are in.
func (p *PodPorts) awaitPolicy(ctx context.Context, pod cni.PodRef) error {
	key := policy.PodKey{Namespace: pod.Namespace, Name: pod.Name, UID: pod.UID}
	for {
		listed, gen, changed := p.state.PolicyHasPod(key)
		if listed {
			if err := p.syncer.WaitFor(ctx, gen); err != nil {
				return policyNotArrived(pod, err)
			}
			return nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return policyNotArrived(pod, ctx.Err())
		}
	}
}

// policyNotArrived is the CNI error of a pod whose NetworkPolicy is not in place in time:
// the runtime should retry the sandbox.
func policyNotArrived(pod cni.PodRef, cause error) error {
	if errors.Is(cause, context.DeadlineExceeded) || errors.Is(cause, context.Canceled) {
		return cni.Errorf(cni.CodeTryAgainLater,
			"NetworkPolicy for pod %s (uid %s) has not arrived from kovs-controller: %w", pod, pod.UID, cause).
			WithDetails("the pod stays closed until kovs-controller has evaluated it; check that kovs-controller runs and that this node's kovs-agent is connected to it")
	}
	return cni.Errorf(cni.CodeTryAgainLater, "NetworkPolicy for pod %s is not installed yet: %w", pod, cause)
}
