package plugin

import (
	"context"
	"fmt"
	"net"

	"github.com/containernetworking/cni/pkg/types"
	types100 "github.com/containernetworking/cni/pkg/types/100"
	"github.com/containernetworking/cni/pkg/version"
	"github.com/containernetworking/plugins/pkg/ns"

	"github.com/kovs-net/kovs/go-controller/pkg/cni"
)

// check is CNI CHECK: the pod interface exists in the netns with the MAC, addresses and
// routes of the ADD result (prevResult), the host end exists, the agent confirms the
// port and flows, and portmap the pod's hostPorts (when the runtime passed any).
func (p *Plugin) check(inv *invocation) error {
	pod, err := parsePod(inv.args.Args, true)
	if err != nil {
		return err
	}
	inv.log = inv.log.WithField("pod", pod.String())
	var rawPrev []byte // for portmap; taken before prevResult, which drops it
	if inv.hasHostPorts() {
		if rawPrev, err = rawPrevResult(inv.conf); err != nil {
			return err
		}
	}
	prev, err := prevResult(inv.conf)
	if err != nil {
		return err
	}
	want, err := expectedPodInterface(prev, inv.args.IfName)
	if err != nil {
		return err
	}
	podNS, err := openPodNetNS(inv.args.Netns)
	if err != nil {
		return err
	}
	defer func() { _ = podNS.Close() }()
	if err := podNS.Do(func(ns.NetNS) error { return want.verify() }); err != nil {
		return fmt.Errorf("check pod %s in netns %s: %w", pod, inv.args.Netns, err)
	}
	hostName := cni.HostInterfaceName(inv.args.ContainerID)
	if _, err := linkByName(hostName); err != nil {
		return fmt.Errorf("check pod %s: host end %s of the veth: %w", pod, hostName, err)
	}
	if err := checkWithAgent(inv, pod, hostName, want); err != nil {
		return err
	}
	if err := inv.runPortmap("CHECK", rawPrev); err != nil {
		return fmt.Errorf("check the hostPorts of pod %s: %w", pod, err)
	}
	return nil
}

// checkWithAgent asks the agent to verify the port and flows.
func checkWithAgent(inv *invocation, pod cni.PodRef, hostName string, want *expectedInterface) error {
	ctx, cancel := context.WithTimeout(context.Background(), agentCallTimeout)
	defer cancel()
	req := cni.AttachRequest{
		ContainerID: inv.args.ContainerID,
		Netns:       inv.args.Netns,
		IfName:      inv.args.IfName,
		Pod:         pod,
		HostIfName:  hostName,
		MAC:         want.mac.String(),
	}
	for _, ip := range want.ips {
		c := cni.IPConfig{Address: ip.Address.String()}
		if ip.Gateway != nil {
			c.Gateway = ip.Gateway.String()
		}
		req.IPs = append(req.IPs, c)
	}
	if err := inv.agent.Check(ctx, req); err != nil {
		return fmt.Errorf("check pod %s with kovs-agent: %w", pod, err)
	}
	return nil
}

// prevResult returns the ADD result the runtime passed to CHECK.
func prevResult(conf *NetConf) (*types100.Result, error) {
	if err := version.ParsePrevResult(&conf.NetConf); err != nil {
		return nil, withCode(types.ErrDecodingFailure, fmt.Errorf("parse prevResult: %w", err))
	}
	if conf.PrevResult == nil {
		return nil, withCode(types.ErrInvalidNetworkConfig, fmt.Errorf("CHECK needs the ADD result (prevResult) in the network config"))
	}
	prev, err := types100.NewResultFromResult(conf.PrevResult)
	if err != nil {
		return nil, withCode(types.ErrDecodingFailure, fmt.Errorf("convert prevResult: %w", err))
	}
	return prev, nil
}

// expectedInterface is the pod interface as the ADD result describes it.
type expectedInterface struct {
	name   string
	mac    net.HardwareAddr
	ips    []*types100.IPConfig
	routes []*types.Route
}

// expectedPodInterface finds ifName (the one with a Sandbox) in prev, with its addresses.
func expectedPodInterface(prev *types100.Result, ifName string) (*expectedInterface, error) {
	for i, iface := range prev.Interfaces {
		if iface.Name != ifName || iface.Sandbox == "" {
			continue
		}
		mac, err := net.ParseMAC(iface.Mac)
		if err != nil {
			return nil, withCode(types.ErrInvalidNetworkConfig, fmt.Errorf("prevResult: MAC of %s: %w", ifName, err))
		}
		want := &expectedInterface{name: ifName, mac: mac, routes: prev.Routes}
		for _, ip := range prev.IPs {
			if ip.Interface != nil && *ip.Interface == i {
				want.ips = append(want.ips, ip)
			}
		}
		return want, nil
	}
	return nil, withCode(types.ErrInvalidNetworkConfig, fmt.Errorf("prevResult has no interface %s in a sandbox", ifName))
}
