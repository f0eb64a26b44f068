package plugin

import (
	"errors"
	"fmt"

	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/containernetworking/plugins/pkg/utils/sysctl"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// createVeth creates the pod's veth in one step: the pod end, podIfName, in podNS; the
// host end, hostName, in the calling thread's namespace (the runtime's, i.e. the node's).
// Both ends are down; the pod end gets its MAC, MTU and addresses once the agent has
// allocated them (podInterfaceSpec.configure). A host end left by an earlier ADD of the
// same sandbox that was killed half-way is replaced.
func createVeth(podNS ns.NetNS, hostName, podIfName string) error {
	if err := deleteLinkByName(hostName); err != nil {
		return fmt.Errorf("remove the stale host end of the veth: %w", err)
	}
	hostNS, err := ns.GetCurrentNS()
	if err != nil {
		return fmt.Errorf("open the current netns: %w", err)
	}
	defer func() { _ = hostNS.Close() }()
	attrs := netlink.NewLinkAttrs()
	attrs.Name = podIfName
	veth := &netlink.Veth{
		LinkAttrs:     attrs,
		PeerName:      hostName,
		PeerNamespace: netlink.NsFd(int(hostNS.Fd())),
	}
	err = podNS.Do(func(ns.NetNS) error { return netlink.LinkAdd(veth) })
	switch {
	case errors.Is(err, unix.EEXIST):
		return fmt.Errorf("create veth %s-%s: an interface %s already exists in netns %s", podIfName, hostName, podIfName, podNS.Path())
	case err != nil:
		return fmt.Errorf("create veth %s-%s in netns %s: %w", podIfName, hostName, podNS.Path(), err)
	}
	return nil
}

// hostEndSysctls keep the node's own network stack out of what a pod sends on its veth:
// the pod's frames are br-int's alone. On the userspace datapath OVS reads the host end
// with a packet socket and the kernel still receives every frame there, so without
// these a pod could reach the node's addresses straight through its veth, with any
// source (a broadcast frame needs no neighbour entry), past the spoof guard: no IPv6 on
// the host end, IPv4 only from sources routed through it (none: strict reverse-path
// filtering), no forwarding of what arrives on it, and no ARP answers on it. With the
// kernel datapath the host end is an OVS port, whose frames the stack never sees.
var hostEndSysctls = []struct{ key, value string }{
	{"net/ipv6/conf/%s/disable_ipv6", "1"},
	{"net/ipv4/conf/%s/rp_filter", "1"},
	{"net/ipv4/conf/%s/forwarding", "0"},
	{"net/ipv4/conf/%s/arp_ignore", "8"},
}

// setUpHostEnd closes the node's stack on the host end (hostEndSysctls), brings it up
// and returns it.
func setUpHostEnd(hostName string) (netlink.Link, error) {
	link, err := linkByName(hostName)
	if err != nil {
		return nil, fmt.Errorf("look up the host end %s: %w", hostName, err)
	}
	for _, s := range hostEndSysctls {
		if _, err := sysctl.Sysctl(fmt.Sprintf(s.key, hostName), s.value); err != nil {
			return nil, fmt.Errorf("close the host end %s to the node's network stack (%s=%s): %w",
				hostName, fmt.Sprintf(s.key, hostName), s.value, err)
		}
	}
	if err := netlink.LinkSetUp(link); err != nil {
		return nil, fmt.Errorf("set the host end %s up: %w", hostName, err)
	}
	return link, nil
}

// deleteVeth deletes the pod's veth: the pod end in podNS (nil when the netns is gone,
// and the veth with it), then the host end in the calling thread's namespace if it is
// still around. Missing links are success.
func deleteVeth(podNS ns.NetNS, hostName, podIfName string) error {
	if podNS != nil {
		err := podNS.Do(func(ns.NetNS) error { return deleteLinkByName(podIfName) })
		if err != nil {
			return fmt.Errorf("in netns %s: %w", podNS.Path(), err)
		}
	}
	return deleteLinkByName(hostName)
}

// setMTU sets the link's MTU unless it has it already.
func setMTU(link netlink.Link, mtu int) error {
	if mtu == 0 || link.Attrs().MTU == mtu {
		return nil
	}
	if err := netlink.LinkSetMTU(link, mtu); err != nil {
		return fmt.Errorf("set MTU %d: %w", mtu, err)
	}
	return nil
}
