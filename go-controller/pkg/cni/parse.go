package cni

import (
	"errors"
	"fmt"
	"net"
)

// Bounds of PodNetworkConfig.MTU: IPv6 needs 1280, and veth allows up to 65535.
const (
	minMTU = 1280
	maxMTU = 65535
)

// Parse returns the address (IP and prefix, "10.244.1.5/24" keeps the .5) and the
// gateway (nil when empty).
func (c IPConfig) Parse() (*net.IPNet, net.IP, error) {
	ip, prefix, err := net.ParseCIDR(c.Address)
	if err != nil {
		return nil, nil, fmt.Errorf("pod address %q: %w", c.Address, err)
	}
	addr := &net.IPNet{IP: canonical(ip), Mask: prefix.Mask}
	if len(addr.IP) != len(addr.Mask) {
		return nil, nil, fmt.Errorf("pod address %q: IPv4-mapped IPv6 addresses are not supported", c.Address)
	}
	if c.Gateway == "" {
		return addr, nil, nil
	}
	gw := net.ParseIP(c.Gateway)
	if gw == nil {
		return nil, nil, fmt.Errorf("gateway %q of pod address %s is not an IP address", c.Gateway, c.Address)
	}
	if isIPv4(gw) != isIPv4(addr.IP) {
		return nil, nil, fmt.Errorf("gateway %s of pod address %s is of the other IP family", c.Gateway, c.Address)
	}
	return addr, canonical(gw), nil
}

// Parse returns the destination prefix and the next hop (nil when empty).
func (r RouteConfig) Parse() (*net.IPNet, net.IP, error) {
	_, dst, err := net.ParseCIDR(r.Dst)
	if err != nil {
		return nil, nil, fmt.Errorf("route destination %q: %w", r.Dst, err)
	}
	dst.IP = canonical(dst.IP)
	if len(dst.IP) != len(dst.Mask) {
		return nil, nil, fmt.Errorf("route destination %q: IPv4-mapped IPv6 prefixes are not supported", r.Dst)
	}
	if r.GW == "" {
		return dst, nil, nil
	}
	gw := net.ParseIP(r.GW)
	if gw == nil {
		return nil, nil, fmt.Errorf("next hop %q of route to %s is not an IP address", r.GW, r.Dst)
	}
	if isIPv4(gw) != isIPv4(dst.IP) {
		return nil, nil, fmt.Errorf("next hop %s of route to %s is of the other IP family", r.GW, r.Dst)
	}
	return dst, canonical(gw), nil
}

// Validate checks that c can be configured as it is: one address per family (at least
// one), a unicast MAC, routes that parse and an MTU in [1280, 65535].
func (c *PodNetworkConfig) Validate() error {
	if _, err := parseIPs(c.IPs); err != nil {
		return err
	}
	if _, err := parseMAC(c.MAC); err != nil {
		return err
	}
	for _, r := range c.Routes {
		if _, _, err := r.Parse(); err != nil {
			return err
		}
	}
	if c.MTU < minMTU || c.MTU > maxMTU {
		return fmt.Errorf("MTU %d is outside [%d, %d]", c.MTU, minMTU, maxMTU)
	}
	return nil
}

// parseIPs parses every address and checks there is at most one per family.
func parseIPs(ips []IPConfig) ([]*net.IPNet, error) {
	if len(ips) == 0 {
		return nil, errors.New("no pod address")
	}
	var out []*net.IPNet
	seen := map[bool]string{}
	for _, c := range ips {
		addr, _, err := c.Parse()
		if err != nil {
			return nil, err
		}
		v4 := isIPv4(addr.IP)
		if prev, ok := seen[v4]; ok {
			return nil, fmt.Errorf("two pod addresses of the same family: %s and %s", prev, c.Address)
		}
		seen[v4] = c.Address
		out = append(out, addr)
	}
	return out, nil
}

// parseMAC parses a unicast Ethernet address.
func parseMAC(s string) (net.HardwareAddr, error) {
	mac, err := net.ParseMAC(s)
	if err != nil {
		return nil, fmt.Errorf("pod MAC %q: %w", s, err)
	}
	if len(mac) != 6 || mac[0]&1 == 1 {
		return nil, fmt.Errorf("pod MAC %s is not a unicast Ethernet address", s)
	}
	return mac, nil
}

func isIPv4(ip net.IP) bool { return ip.To4() != nil }

// canonical returns the 4-byte form of IPv4 addresses, so they compare and print the
// same whatever form they were parsed from.
func canonical(ip net.IP) net.IP {
	if v4 := ip.To4(); v4 != nil {
		return v4
	}
	return ip
}
