package plugin

import (
	"fmt"
	"net"

	"github.com/kovs-net/kovs/go-controller/pkg/cni"
)

// podInterfaceSpec is what the pod's interface gets, parsed from the agent's config.
type podInterfaceSpec struct {
	name              string
	mac               net.HardwareAddr
	mtu               int
	addrs             []podAddress
	routes            []podRoute // in the order they are added
	disableTxChecksum bool
}

// podAddress is one pod address and its family's gateway (nil: none).
type podAddress struct {
	ipnet   *net.IPNet
	gateway net.IP
}

// podRoute is a route in the pod; a nil gw is a route on the link.
type podRoute struct {
	dst *net.IPNet
	gw  net.IP
}

// newPodInterfaceSpec parses cfg (which the client validated) for interface ifName.
func newPodInterfaceSpec(ifName string, cfg *cni.PodNetworkConfig) (*podInterfaceSpec, error) {
	mac, err := net.ParseMAC(cfg.MAC)
	if err != nil {
		return nil, fmt.Errorf("pod MAC %q: %w", cfg.MAC, err)
	}
	spec := &podInterfaceSpec{
		name:              ifName,
		mac:               mac,
		mtu:               cfg.MTU,
		disableTxChecksum: cfg.DisableTxChecksumOffload,
	}
	for _, c := range cfg.IPs {
		addr, gw, err := c.Parse()
		if err != nil {
			return nil, err
		}
		spec.addrs = append(spec.addrs, podAddress{ipnet: addr, gateway: gw})
	}
	spec.routes, err = planRoutes(spec.addrs, cfg.Routes)
	if err != nil {
		return nil, err
	}
	return spec, nil
}

// planRoutes orders the pod's routes: per family with a gateway, the default route via
// it; then the extra routes (without a next hop: via their family's gateway, or on the
// link when it has none). A next hop outside the pod's prefixes is made reachable first
// by a route to it on the link. Later routes to the same destination are dropped.
func planRoutes(addrs []podAddress, extra []cni.RouteConfig) ([]podRoute, error) {
	var plan routePlan
	for _, a := range addrs {
		if a.gateway != nil {
			plan.add(addrs, podRoute{dst: defaultPrefix(a.gateway), gw: a.gateway})
		}
	}
	for _, r := range extra {
		dst, gw, err := r.Parse()
		if err != nil {
			return nil, err
		}
		if gw == nil {
			gw = gatewayFor(addrs, dst.IP)
		}
		plan.add(addrs, podRoute{dst: dst, gw: gw})
	}
	return plan.routes, nil
}

// routePlan collects routes, one per destination.
type routePlan struct {
	routes []podRoute
}

func (p *routePlan) add(addrs []podAddress, r podRoute) {
	if r.gw != nil && !onLink(addrs, r.gw) {
		p.add(addrs, podRoute{dst: hostPrefix(r.gw)})
	}
	for _, have := range p.routes {
		if have.dst.String() == r.dst.String() {
			return
		}
	}
	p.routes = append(p.routes, r)
}

// onLink reports whether ip is inside one of the pod's prefixes.
func onLink(addrs []podAddress, ip net.IP) bool {
	for _, a := range addrs {
		if a.ipnet.Contains(ip) {
			return true
		}
	}
	return false
}

// gatewayFor returns the gateway of the pod address of ip's family, or nil.
func gatewayFor(addrs []podAddress, ip net.IP) net.IP {
	for _, a := range addrs {
		if isIPv4(a.ipnet.IP) == isIPv4(ip) {
			return a.gateway
		}
	}
	return nil
}

func (s *podInterfaceSpec) hasIPv6() bool {
	for _, a := range s.addrs {
		if !isIPv4(a.ipnet.IP) {
			return true
		}
	}
	return false
}

// ipConfigs returns the addresses in the protocol's form.
func (s *podInterfaceSpec) ipConfigs() []cni.IPConfig {
	out := make([]cni.IPConfig, 0, len(s.addrs))
	for _, a := range s.addrs {
		c := cni.IPConfig{Address: a.ipnet.String()}
		if a.gateway != nil {
			c.Gateway = a.gateway.String()
		}
		out = append(out, c)
	}
	return out
}

func isIPv4(ip net.IP) bool { return ip.To4() != nil }

// defaultPrefix is 0.0.0.0/0 or ::/0, for ip's family.
func defaultPrefix(ip net.IP) *net.IPNet {
	if isIPv4(ip) {
		return &net.IPNet{IP: net.IPv4zero.To4(), Mask: net.CIDRMask(0, 32)}
	}
	return &net.IPNet{IP: net.IPv6zero, Mask: net.CIDRMask(0, 128)}
}

// hostPrefix is ip/32 or ip/128.
func hostPrefix(ip net.IP) *net.IPNet {
	if v4 := ip.To4(); v4 != nil {
		return &net.IPNet{IP: v4, Mask: net.CIDRMask(32, 32)}
	}
	return &net.IPNet{IP: ip, Mask: net.CIDRMask(128, 128)}
}
