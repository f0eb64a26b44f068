package plugin

import (
	"bytes"
	"fmt"
	"net"

	"github.com/vishvananda/netlink"
)

// verify checks, inside the pod's namespace, that the interface is up with the expected
// MAC, addresses and routes.
func (want *expectedInterface) verify() error {
	link, err := linkByName(want.name)
	if isLinkNotFound(err) {
		return fmt.Errorf("interface %s is missing", want.name)
	}
	if err != nil {
		return fmt.Errorf("look up %s: %w", want.name, err)
	}
	if got := link.Attrs().HardwareAddr; !bytes.Equal(got, want.mac) {
		return fmt.Errorf("interface %s has MAC %s, want %s", want.name, got, want.mac)
	}
	if link.Attrs().Flags&net.FlagUp == 0 {
		return fmt.Errorf("interface %s is down", want.name)
	}
	if err := want.verifyAddrs(link); err != nil {
		return err
	}
	return want.verifyRoutes(link)
}

func (want *expectedInterface) verifyAddrs(link netlink.Link) error {
	addrs, err := addrList(link)
	if err != nil {
		return fmt.Errorf("list addresses of %s: %w", want.name, err)
	}
	for _, ip := range want.ips {
		if !hasAddr(addrs, &ip.Address) {
			return fmt.Errorf("interface %s lacks address %s", want.name, ip.Address.String())
		}
	}
	return nil
}

func (want *expectedInterface) verifyRoutes(link netlink.Link) error {
	routes, err := routeList(link)
	if err != nil {
		return fmt.Errorf("list routes of %s: %w", want.name, err)
	}
	for _, r := range want.routes {
		if !hasRoute(routes, &r.Dst, r.GW) {
			return fmt.Errorf("route %s via %v on %s is missing", r.Dst.String(), r.GW, want.name)
		}
	}
	return nil
}

func hasAddr(addrs []netlink.Addr, want *net.IPNet) bool {
	for _, a := range addrs {
		if a.IPNet != nil && a.IP.Equal(want.IP) && bytes.Equal(a.Mask, want.Mask) {
			return true
		}
	}
	return false
}

// hasRoute reports whether routes holds dst via gw (nil: on the link). The kernel
// reports default routes with a nil or a zero-length Dst, depending on the version.
func hasRoute(routes []netlink.Route, dst *net.IPNet, gw net.IP) bool {
	for _, r := range routes {
		if routeDst(r, dst).String() == dst.String() && r.Gw.Equal(gw) {
			return true
		}
	}
	return false
}

// routeDst is r's destination, with a nil Dst read as the default route of like's family.
func routeDst(r netlink.Route, like *net.IPNet) *net.IPNet {
	if r.Dst != nil {
		return r.Dst
	}
	return defaultPrefix(like.IP)
}
