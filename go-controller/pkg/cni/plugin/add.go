package plugin

import (
	"context"
	"fmt"

	"github.com/containernetworking/plugins/pkg/ns"

	"github.com/kovs-net/kovs/go-controller/pkg/cni"
)

// add is CNI ADD: it asks the agent for the pod's network config, creates the veth and
// configures the pod end, asks the agent to attach the host end to br-int (which returns
// once the pod's flows are installed), has portmap map the pod's hostPorts if it has any,
// and prints the result. Nothing is created until the agent has the pod's addresses; any
// later failure undoes every step taken.
func (p *Plugin) add(inv *invocation) error {
	pod, err := parsePod(inv.args.Args, true)
	if err != nil {
		return err
	}
	inv.log = inv.log.WithField("pod", pod.String())
	ctx, cancel := context.WithTimeout(context.Background(), podNetworkTimeout)
	defer cancel()
	cfg, err := inv.agent.PodNetwork(ctx, pod)
	if err != nil {
		return fmt.Errorf("get the network config of pod %s from kovs-agent: %w", pod, err)
	}
	spec, err := newPodInterfaceSpec(inv.args.IfName, cfg)
	if err != nil {
		return fmt.Errorf("network config of pod %s: %w", pod, err)
	}
	podNS, err := openPodNetNS(inv.args.Netns)
	if err != nil {
		return err
	}
	defer func() { _ = podNS.Close() }()
	return p.attach(inv, pod, podNS, spec)
}

// attach creates and attaches the pod's veth, undoing what it did if any step fails: the
// veth is deleted, and the agent told to detach if it was asked to attach.
func (p *Plugin) attach(inv *invocation, pod cni.PodRef, podNS ns.NetNS, spec *podInterfaceSpec) (err error) {
	hostName := cni.HostInterfaceName(inv.args.ContainerID)
	success := false
	if err := createVeth(podNS, hostName, spec); err != nil {
		return err
	}
	defer func() {
		if !success {
			err = withUndo(err, deleteVeth(podNS, hostName, spec.name))
		}
	}()
	hostLink, err := setUpHostEnd(hostName)
	if err != nil {
		return err
	}
	if err := podNS.Do(func(ns.NetNS) error { return spec.configure() }); err != nil {
		return fmt.Errorf("configure %s in netns %s: %w", spec.name, podNS.Path(), err)
	}
	defer func() {
		if !success {
			err = withUndo(err, detach(inv, pod))
		}
	}()
	if err := attachToAgent(inv, pod, hostName, spec); err != nil {
		return err
	}
	result, err := encodeResult(newResult(hostLink, spec, inv.args.Netns), inv.conf.CNIVersion)
	if err != nil {
		return err
	}
	if err := inv.runPortmap("ADD", result); err != nil {
		// portmap may have made some of its rules: its DEL removes what there is.
		return withUndo(fmt.Errorf("map the hostPorts of pod %s: %w", pod, err), inv.unmapHostPorts(result))
	}
	if err := writeResult(p.stdout, result); err != nil {
		return withUndo(err, inv.unmapHostPorts(result))
	}
	success = true
	return nil
}

// attachToAgent asks the agent to plug the host end into br-int.
func attachToAgent(inv *invocation, pod cni.PodRef, hostName string, spec *podInterfaceSpec) error {
	ctx, cancel := context.WithTimeout(context.Background(), attachTimeout)
	defer cancel()
	req := cni.AttachRequest{
		ContainerID: inv.args.ContainerID,
		Netns:       inv.args.Netns,
		IfName:      spec.name,
		Pod:         pod,
		HostIfName:  hostName,
		MAC:         spec.mac.String(),
		IPs:         spec.ipConfigs(),
	}
	if err := inv.agent.Attach(ctx, req); err != nil {
		return fmt.Errorf("attach pod %s to br-int (port %s): %w", pod, hostName, err)
	}
	return nil
}

// detach asks the agent to remove the sandbox's port (pod may be zero).
func detach(inv *invocation, pod cni.PodRef) error {
	ctx, cancel := context.WithTimeout(context.Background(), agentCallTimeout)
	defer cancel()
	req := cni.DetachRequest{ContainerID: inv.args.ContainerID, IfName: inv.args.IfName, Pod: pod}
	if err := inv.agent.Detach(ctx, req); err != nil {
		return fmt.Errorf("detach the sandbox from br-int: %w", err)
	}
	return nil
}

// withUndo adds to err that undoing failed too, when it did.
func withUndo(err, undoErr error) error {
	if undoErr == nil {
		return err
	}
	return fmt.Errorf("%w (and undoing failed: %v)", err, undoErr)
}
