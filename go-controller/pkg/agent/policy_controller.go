package agent

import (
	log "github.com/sirupsen/logrus"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
)

// ReasonControllerTooOld is the reason of the Node Event an agent posts when kovs-controller
// is older than it (the wrong upgrade order): it takes no policy from it and accepts no
// new pod until the controller is upgraded.
const ReasonControllerTooOld = "ControllerTooOld"

// ControllerCompatible is told, for every connection the controller answered, whether this
// agent may take policy from it (nil) or not (why: the stream client's
// *stream.ControllerTooOldError, whose message names the fix). It implements
// stream.ControllerNotifier. The stream client takes nothing from a controller it refuses;
// the agent holds the node meanwhile (ControllerError).
func (p *NodePolicy) ControllerCompatible(err error) {
	p.mu.Lock()
	was := p.controllerErr
	p.controllerErr = err
	onChange := p.onController
	p.mu.Unlock()
	if (was == nil) != (err == nil) && onChange != nil {
		onChange(err)
	}
}

// ControllerError is why the controller's policy is refused, nil while it is taken.
func (p *NodePolicy) ControllerError() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.controllerErr
}

// controllerVerdict logs and reports a change of the controller's compatibility: an
// Error line and a Warning Event on the Node that name the fix, or that the controller
// is taken again.
func (a *Agent) controllerVerdict(err error) {
	logger := log.WithField("node", a.cfg.NodeName)
	if err == nil {
		logger.Info("kovs-controller's policy stream is of a version this agent takes; policy and new pods resume")
		return
	}
	logger.WithError(err).Error("refusing kovs-controller's policy: upgrade kovs-controller first")
	if a.events != nil {
		a.events.Event(&corev1.ObjectReference{Kind: "Node", APIVersion: "v1", Name: a.cfg.NodeName, UID: types.UID(a.cfg.NodeName)},
			corev1.EventTypeWarning, ReasonControllerTooOld, err.Error())
	}
}

// controllerError is why the node must hold still (nil: the controller is taken, or no
// NetworkPolicy feed runs).
func (a *Agent) controllerError() error {
	if a.policy == nil {
		return nil
	}
	return a.policy.ControllerError()
}
