package agent

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/kovs-net/kovs/go-controller/pkg/cni"
	"github.com/kovs-net/kovs/go-controller/pkg/policy/stream"
)

// The verdict on the controller reaches the agent once per change, and while the
// controller is too old CNI ADD and the readiness check name the fix even once the node is
// programmed; CNI STATUS stays ready (the runtime keeps the node's network ready).
var _ stream.ControllerNotifier = (*NodePolicy)(nil)

func TestAControllerTooOldHoldsPodsBack(t *testing.T) {
	a := &Agent{}
	a.ready.set(nil) // programmed: only the controller's verdict may refuse pods
	cniServer := &PodPorts{readiness: a.ready.get, admission: a.controllerError}
	add := func() error {
		_, err := cniServer.Add(context.Background(), cni.AddRequest{})
		return err
	}
	a.policy = NewNodePolicy("node-1", NewNodeState(1, nil), func() uint64 { return 0 })
	var told []error
	a.policy.onController = func(err error) { told = append(told, err) }
	a.health.policy.Store(a.policy)

	a.policy.ControllerCompatible(nil)
	if len(told) != 0 || a.controllerError() != nil {
		t.Fatalf("a compatible controller: told %v, controller error %v; want nothing told and none", told, a.controllerError())
	}
	tooOld := &stream.ControllerTooOldError{Version: 1}
	a.policy.ControllerCompatible(tooOld)
	a.policy.ControllerCompatible(tooOld)
	if len(told) != 1 || !errors.Is(told[0], tooOld) {
		t.Fatalf("told %v, want the refusal once", told)
	}
	if err := cniServer.Status(context.Background()); err != nil {
		t.Errorf("CNI STATUS with a controller too old: %v, want ready (running pods are not the controller's concern)", err)
	}
	for what, err := range map[string]error{"CNI ADD": add(), "policy-feed check": a.policyFeedCheck()} {
		if err == nil || !strings.Contains(err.Error(), "upgrade kovs-controller first") {
			t.Errorf("%s with a controller too old: %v, want the fix named", what, err)
		}
	}
	a.policy.ControllerCompatible(nil)
	if len(told) != 2 || told[1] != nil || a.controllerError() != nil {
		t.Errorf("after the controller's upgrade: told %v, controller error %v; want nil told and none", told, a.controllerError())
	}
}
