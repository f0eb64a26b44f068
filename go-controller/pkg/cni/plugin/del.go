package plugin

import (
	"errors"
	"fmt"

	"github.com/kovs-net/kovs/go-controller/pkg/cni"
)

// del is CNI DEL. It is idempotent: a missing netns, link or port is success.
//
// It has portmap remove the pod's hostPorts (when the runtime passed any), asks the agent
// to detach the sandbox, then deletes the veth (the pod end if the
// netns still exists, and the host end if it is still around).
//
// When the agent is not running (nothing accepts on its socket), DEL still removes the
// veth and succeeds, logging a warning. A failed DEL makes kubelet retry forever and
// keeps the pod Terminating, which would turn an agent outage into stuck pod deletions
// and node drains; meanwhile nothing is lost by going on: with the veth gone no traffic
// reaches the old sandbox, the agent reconciles br-int's ports against the node's pods
// when it starts, and the runtime's CNI GC removes whatever is left. When the agent
// answers with an error, DEL returns it (after removing the veth) so that the runtime
// retries and the port does not linger.
func (p *Plugin) del(inv *invocation) error {
	pod, err := parsePod(inv.args.Args, false)
	if err != nil {
		inv.log.WithError(err).Warn("ignoring CNI_ARGS: detaching by container ID only")
	}
	if !pod.IsZero() {
		inv.log = inv.log.WithField("pod", pod.String())
	}
	// portmap first, as when the conflist chained it after kovs-cni: a runtime deletes in
	// reverse order.
	portmapErr := inv.delPortmap()
	agentErr := detach(inv, pod)
	if errors.Is(agentErr, cni.ErrAgentUnreachable) {
		inv.log.WithError(agentErr).Warn("kovs-agent not running: removing the veth only; the agent removes the port when it starts")
		agentErr = nil
	}
	vethErr := deletePodVeth(inv)
	return joinErrors(portmapErr, agentErr, vethErr)
}

// delPortmap removes the pod's hostPorts (when the runtime passed any) with portmap's DEL.
func (inv *invocation) delPortmap() error {
	if !inv.hasHostPorts() {
		return nil
	}
	prev, err := rawPrevResult(inv.conf)
	if err != nil {
		return err
	}
	return inv.unmapHostPorts(prev)
}

// joinErrors joins the errors that are not nil with "; ", keeping each for errors.Is.
func joinErrors(errs ...error) error {
	var joined error
	for _, err := range errs {
		switch {
		case err == nil:
		case joined == nil:
			joined = err
		default:
			joined = fmt.Errorf("%w; %w", joined, err)
		}
	}
	return joined
}

// deletePodVeth deletes the sandbox's veth; a gone netns or link is success.
func deletePodVeth(inv *invocation) error {
	hostName := cni.HostInterfaceName(inv.args.ContainerID)
	if inv.args.Netns == "" {
		return deleteVeth(nil, hostName, inv.args.IfName)
	}
	podNS, err := openPodNetNS(inv.args.Netns)
	if isNetNSGone(err) {
		return deleteVeth(nil, hostName, inv.args.IfName)
	}
	if err != nil {
		return err
	}
	defer func() { _ = podNS.Close() }()
	return deleteVeth(podNS, hostName, inv.args.IfName)
}
