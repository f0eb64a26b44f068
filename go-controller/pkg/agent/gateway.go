package agent

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// Gateway is the node's side of br-int: the OVS internal port (a tap in netdev mode) that
// carries the pods' gateway addresses in the node's network namespace. The host reaches
// every pod through it, and pods reach the host and everything off-cluster through it.
type Gateway struct {
	Name         string
	MAC          net.HardwareAddr
	Addresses    []netip.Prefix // gateway IP with its pod subnet's prefix length, per family
	ClusterCIDRs []netip.Prefix
	MTU          int
}

// Configure gives the gateway link its MAC, MTU and addresses, brings it up, routes the
// cluster CIDRs through it (on-link: OVS answers the host's ARP/ND for remote pod blocks),
// and turns on forwarding. Idempotent.
func (g Gateway) Configure(wait time.Duration) error {
	link, err := waitForLink(g.Name, wait)
	if err != nil {
		return err
	}
	if err := netlink.LinkSetHardwareAddr(link, g.MAC); err != nil {
		return fmt.Errorf("set MAC of %s: %w", g.Name, err)
	}
	if err := netlink.LinkSetMTU(link, g.MTU); err != nil {
		return fmt.Errorf("set MTU %d of %s: %w", g.MTU, g.Name, err)
	}
	for _, a := range g.Addresses {
		if err := ensureAddress(link, a); err != nil {
			return err
		}
	}
	if err := netlink.LinkSetUp(link); err != nil {
		return fmt.Errorf("bring %s up: %w", g.Name, err)
	}
	for _, cidr := range g.ClusterCIDRs {
		if err := g.ensureRoute(link, cidr); err != nil {
			return err
		}
	}
	return g.forwarding()
}

func waitForLink(name string, wait time.Duration) (netlink.Link, error) {
	deadline := time.Now().Add(wait)
	for {
		link, err := netlink.LinkByName(name)
		if err == nil {
			return link, nil
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("gateway link %s did not appear within %s (is ovs-vswitchd running?): %w", name, wait, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func ensureAddress(link netlink.Link, p netip.Prefix) error {
	addr := &netlink.Addr{IPNet: &net.IPNet{IP: p.Addr().AsSlice(), Mask: net.CIDRMask(p.Bits(), p.Addr().BitLen())}}
	if p.Addr().Is6() {
		addr.Flags = unix.IFA_F_NODAD
	}
	if err := netlink.AddrReplace(link, addr); err != nil {
		return fmt.Errorf("add %s to %s: %w", p, link.Attrs().Name, err)
	}
	return nil
}

// ensureRoute routes a cluster CIDR on-link over the gateway, from the gateway address of
// that family, with the pod MTU (so the host never sends a pod more than fits the tunnel).
func (g Gateway) ensureRoute(link netlink.Link, cidr netip.Prefix) error {
	var src net.IP
	for _, a := range g.Addresses {
		if a.Addr().Is4() == cidr.Addr().Is4() {
			src = a.Addr().AsSlice()
		}
	}
	if src == nil {
		return nil // this node has no block of that family
	}
	route := &netlink.Route{LinkIndex: link.Attrs().Index, Scope: netlink.SCOPE_LINK, Src: src, MTU: g.MTU,
		Dst: &net.IPNet{IP: cidr.Addr().AsSlice(), Mask: net.CIDRMask(cidr.Bits(), cidr.Addr().BitLen())}}
	if err := netlink.RouteReplace(route); err != nil {
		return fmt.Errorf("route %s via %s: %w", cidr, g.Name, err)
	}
	return nil
}

// forwarding makes the node route between the gateway and its uplink (pods reaching other
// nodes' addresses), with loose reverse-path filtering on the gateway: replies from other
// nodes come back through the tunnel, not the way the kernel would route them.
func (g Gateway) forwarding() error {
	settings := map[string]string{
		"net/ipv4/ip_forward":                           "1",
		"net/ipv4/conf/" + g.Name + "/rp_filter":        "2",
		"net/ipv6/conf/all/forwarding":                  "1",
		"net/ipv6/conf/" + g.Name + "/accept_ra":        "0",
		"net/ipv6/conf/" + g.Name + "/accept_redirects": "0",
	}
	var errs []error
	for key, value := range settings {
		path := filepath.Join("/proc/sys", key)
		if err := os.WriteFile(path, []byte(value), 0o644); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, fmt.Errorf("sysctl %s=%s: %w", key, value, err))
		}
	}
	return errors.Join(errs...)
}

// UplinkMTU returns the MTU of the interface that holds addr (the node's tunnel endpoint).
func UplinkMTU(addr netip.Addr) (int, string, error) {
	links, err := netlink.LinkList()
	if err != nil {
		return 0, "", err
	}
	for _, l := range links {
		addrs, err := netlink.AddrList(l, netlink.FAMILY_ALL)
		if err != nil {
			continue
		}
		for _, a := range addrs {
			if ip, ok := netip.AddrFromSlice(a.IP); ok && ip.Unmap() == addr {
				return l.Attrs().MTU, l.Attrs().Name, nil
			}
		}
	}
	return 0, "", fmt.Errorf("no interface holds the node address %s", addr)
}

// TunnelOverhead is what Geneve adds to a pod packet: outer IP (20 or 40), UDP (8), Geneve
// (8) and the inner Ethernet header (14).
func TunnelOverhead(underlay netip.Addr) int {
	if underlay.Is4() {
		return 20 + 8 + 8 + 14
	}
	return 40 + 8 + 8 + 14
}
