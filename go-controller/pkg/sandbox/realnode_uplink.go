package sandbox

import (
	"fmt"
	"strings"
	"time"
)

// uplinkBridges gives every real node its br-ex once Open vSwitch runs there, which on a
// real node is dist's kovs-ovs pod: what a host's own network configuration does on a
// node whose OVS runs in a pod. br-ex (netdev) takes eth0 as its port, and the node's
// addresses move from eth0 to br-ex in one shell command, so the node is without them
// for a moment only (kubelet and the relays' listeners keep working: a socket bound to an
// address outlives its move to another device).
//
// Why the underlay lives on an OVS bridge at all: the userspace datapath sends Geneve
// only out through the address of an OVS bridge (OVS's native tunnelling routes through
// bridges, not kernel devices). The bridge is recorded in the database on the node's
// /etc/openvswitch, and its tap keeps the node's addresses and routes while ovs-vswitchd
// is away, so a replaced kovs-ovs pod finds br-ex as it was: the node's underlay traffic
// pauses with the pod traffic, and nothing else. kubelet's link to kube-apiserver does not
// use the underlay (the relays serve kube-apiserver on the node's loopback), so the node
// stays Ready through it (docs/sandbox.md#open-vswitch-on-real-nodes).
func (u *upRun) uplinkBridges() error {
	l := u.layout
	for _, n := range u.state.Nodes {
		ns := l.NodeNetNS(n.Name)
		if err := u.waitWhileRunning(KubeletProcess(n.Name), 3*time.Minute, "Open vSwitch (dist's kovs-ovs pod) to answer on "+n.Name, func() error {
			if err := run("ovs-vsctl", "--db=unix:"+l.OVSDBSocket(n.Name), "--timeout=5", "show"); err != nil {
				return err
			}
			return run("ovs-appctl", "-t", OVSVswitchdCtl(l, n.Name), "--timeout=5", "version")
		}); err != nil {
			return err
		}
		if err := u.moveUplinkToBridge(n, ns); err != nil {
			return fmt.Errorf("node %s %s: %w", n.Name, UplinkBridge, err)
		}
	}
	return nil
}

// moveUplinkToBridge makes br-ex with eth0 as its port and moves the node's addresses
// onto it.
func (u *upRun) moveUplinkToBridge(n Node, ns string) error {
	if err := u.makeUplinkBridge(n, ns); err != nil {
		return err
	}
	var cmds []string
	for _, ip := range n.IPs {
		cmds = append(cmds, "ip "+strings.Join(addrArgs("del", ip, uplink), " "), "ip "+strings.Join(addrArgs("add", ip, UplinkBridge), " "))
	}
	cmds = append(cmds, "ip link set "+UplinkBridge+" up")
	return runIn(ns, "sh", "-ec", strings.Join(cmds, "\n"))
}
