package plugin

import (
	"fmt"

	"github.com/containernetworking/plugins/pkg/utils/sysctl"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/kovs-net/kovs/go-controller/pkg/cni/internal/ethtool"
)

// configure sets the pod interface's MAC and MTU, then sets it up with its offloads,
// addresses and routes. It runs inside the pod's namespace (ns.NetNS.Do); the interface
// exists and is down.
func (s *podInterfaceSpec) configure() error {
	link, err := linkByName(s.name)
	if err != nil {
		return fmt.Errorf("look up %s: %w", s.name, err)
	}
	// The MAC before the link is up: the IPv6 link-local address is derived from it then.
	if err := netlink.LinkSetHardwareAddr(link, s.mac); err != nil {
		return fmt.Errorf("set %s's MAC %s: %w", s.name, s.mac, err)
	}
	if err := setMTU(link, s.mtu); err != nil {
		return fmt.Errorf("%s: %w", s.name, err)
	}
	if s.disableTxChecksum {
		if err := ethtool.SetTxChecksum(s.name, false); err != nil {
			return err
		}
	}
	if s.hasIPv6() {
		if _, err := sysctl.Sysctl(fmt.Sprintf("net/ipv6/conf/%s/disable_ipv6", s.name), "0"); err != nil {
			return fmt.Errorf("enable IPv6 on %s: %w", s.name, err)
		}
		// The link-local address from the MAC (modified EUI-64), whatever the netns's
		// default: it is the only link-local source br-int's spoof guard lets through.
		if err := netlink.LinkSetIP6AddrGenMode(link, addrGenModeEUI64); err != nil {
			return fmt.Errorf("derive %s's link-local address from its MAC (EUI-64): %w", s.name, err)
		}
	}
	if err := netlink.LinkSetUp(link); err != nil {
		return fmt.Errorf("set %s up: %w", s.name, err)
	}
	for _, a := range s.netlinkAddrs() {
		if err := netlink.AddrAdd(link, a); err != nil {
			return fmt.Errorf("add address %s to %s: %w", a.IPNet, s.name, err)
		}
	}
	for _, r := range s.netlinkRoutes(link.Attrs().Index) {
		if err := netlink.RouteAdd(r); err != nil {
			return fmt.Errorf("add route %s: %w", describeRoute(r), err)
		}
	}
	return nil
}

// addrGenModeEUI64 is IN6_ADDR_GEN_MODE_EUI64 (linux/if_link.h).
const addrGenModeEUI64 = 0

// netlinkAddrs are the pod's addresses; IPv6 ones skip duplicate address detection (the
// node's agent allocated them, and DAD would delay the pod by seconds).
func (s *podInterfaceSpec) netlinkAddrs() []*netlink.Addr {
	out := make([]*netlink.Addr, 0, len(s.addrs))
	for _, a := range s.addrs {
		addr := &netlink.Addr{IPNet: a.ipnet}
		if !isIPv4(a.ipnet.IP) {
			addr.Flags = unix.IFA_F_NODAD
		}
		out = append(out, addr)
	}
	return out
}

// netlinkRoutes are the pod's routes on the interface with index ifIndex.
func (s *podInterfaceSpec) netlinkRoutes(ifIndex int) []*netlink.Route {
	out := make([]*netlink.Route, 0, len(s.routes))
	for _, r := range s.routes {
		route := &netlink.Route{LinkIndex: ifIndex, Dst: r.dst, Gw: r.gw}
		if r.gw == nil {
			route.Scope = netlink.SCOPE_LINK
		}
		out = append(out, route)
	}
	return out
}

// describeRoute prints a route the way `ip route` does.
func describeRoute(r *netlink.Route) string {
	if r.Gw == nil {
		return r.Dst.String() + " (on link)"
	}
	return fmt.Sprintf("%s via %s", r.Dst, r.Gw)
}
