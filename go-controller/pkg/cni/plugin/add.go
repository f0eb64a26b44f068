package plugin

import (
	"context"
	"fmt"

	"github.com/containernetworking/plugins/pkg/ns"

	"github.com/kovs-net/kovs/go-controller/pkg/cni"
)

// add is CNI ADD: it creates the veth (both ends down, the host end closed to the node's
// stack), makes one call to the agent, which allocates the pod's addresses and MAC,
// plugs the host end into br-int and answers once the pod's flows are installed, then
// configures the pod end with the answer, has portmap map the pod's hostPorts if it has
// any, and prints the result. Any failure undoes every step taken: the veth is deleted,
// and the agent told to detach (which releases the addresses) if it was called.
func (p *Plugin) add(inv *invocation) error {
	pod, err := parsePod(inv.args.Args, true)
	if err != nil {
		return err
	}
	inv.log = inv.log.WithField("pod", pod.String())
	podNS, err := openPodNetNS(inv.args.Netns)
	if err != nil {
		return err
	}
	defer func() { _ = podNS.Close() }()
	return p.attach(inv, pod, podNS)
}

// attach creates the veth, has the agent attach it and configures the pod end, undoing
// what it did if any step fails.
func (p *Plugin) attach(inv *invocation, pod cni.PodRef, podNS ns.NetNS) (err error) {
	hostName := cni.HostInterfaceName(inv.args.ContainerID)
	podIfName := inv.args.IfName
	success := false
	if err := createVeth(podNS, hostName, podIfName); err != nil {
		return err
	}
	defer func() {
		if !success {
			err = withUndo(err, deleteVeth(podNS, hostName, podIfName))
		}
	}()
	hostLink, err := setUpHostEnd(hostName)
	if err != nil {
		return err
	}
	defer func() {
		if !success {
			err = withUndo(err, detach(inv, pod))
		}
	}()
	cfg, err := addToAgent(inv, pod, hostName)
	if err != nil {
		return err
	}
	spec, err := newPodInterfaceSpec(podIfName, cfg)
	if err != nil {
		return fmt.Errorf("network config of pod %s: %w", pod, err)
	}
	if err := setMTU(hostLink, spec.mtu); err != nil {
		return fmt.Errorf("host end %s: %w", hostName, err)
	}
	if err := podNS.Do(func(ns.NetNS) error { return spec.configure() }); err != nil {
		return fmt.Errorf("configure %s in netns %s: %w", spec.name, podNS.Path(), err)
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

// addToAgent is the one call of an ADD to the agent.
func addToAgent(inv *invocation, pod cni.PodRef, hostName string) (*cni.PodNetworkConfig, error) {
	ctx, cancel := context.WithTimeout(context.Background(), addTimeout)
	defer cancel()
	req := cni.AddRequest{
		ContainerID: inv.args.ContainerID,
		Netns:       inv.args.Netns,
		IfName:      inv.args.IfName,
		Pod:         pod,
		HostIfName:  hostName,
	}
	cfg, err := inv.agent.Add(ctx, req)
	if err != nil {
		return nil, fmt.Errorf("add pod %s to br-int (port %s): %w", pod, hostName, err)
	}
	return cfg, nil
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
