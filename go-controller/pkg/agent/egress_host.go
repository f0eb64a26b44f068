package agent

import (
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"time"

	"github.com/mdlayher/arp"
	"github.com/mdlayher/ethernet"
	"github.com/mdlayher/ndp"
	log "github.com/sirupsen/logrus"
	"github.com/vishvananda/netlink"
)

// The host side of the egress IPs this node holds. br-int translates the selected pods'
// traffic to the egress IP (pipeline, egress stage) and hands it to the host through the
// gateway port; the host forwards it out the uplink. The egress IP is not an address of
// the host (its connections would then be the host's): the host routes it into br-int over
// the gateway port (a /32 or /128 via the Service next hop, protocol routeProtoEgress),
// where the replies are un-NATed, and answers ARP or neighbour solicitations for it on the
// uplink, the interface whose network holds the IP, with a proxy neighbour entry
// (proxy_delay 0, so broadcast requests are answered at once; proxy_ndp for IPv6). On
// taking an IP the node announces it: a gratuitous ARP, or an unsolicited neighbour
// advertisement with the override flag, so neighbours move to it at once.
const routeProtoEgress = netlink.RouteProtocol(202)

// egressHost holds the host side of the node's egress IPs.
type egressHost struct {
	gateway string
	held    map[netip.Addr]string // egress IP -> uplink interface
}

// uplinkFor is the interface (not the gateway) with an address whose network holds ip.
func uplinkFor(ip netip.Addr, gateway string) (*net.Interface, error) {
	ifaces, err := net.Interfaces()
	if err != nil {
		return nil, err
	}
	for i := range ifaces {
		ifi := &ifaces[i]
		if ifi.Name == gateway || ifi.Flags&net.FlagLoopback != 0 {
			continue
		}
		addrs, _ := ifi.Addrs()
		for _, a := range addrs {
			p, err := netip.ParsePrefix(a.String())
			if err == nil && p.Masked().Contains(ip) && p.Bits() < ip.BitLen() {
				return ifi, nil
			}
		}
	}
	return nil, fmt.Errorf("no interface of the node has a network holding %s", ip)
}

// interfaceCIDRs are the networks of the node's interfaces (not the gateway, not
// loopback, not link-local): where it can hold egress IPs.
func interfaceCIDRs(gateway string) []netip.Prefix {
	ifaces, err := net.Interfaces()
	if err != nil {
		return nil
	}
	var out []netip.Prefix
	for _, ifi := range ifaces {
		if ifi.Name == gateway || ifi.Flags&net.FlagLoopback != 0 || ifi.Flags&net.FlagUp == 0 {
			continue
		}
		addrs, _ := ifi.Addrs()
		for _, a := range addrs {
			p, err := netip.ParsePrefix(a.String())
			if err != nil || p.Addr().IsLinkLocalUnicast() || p.Bits() == p.Addr().BitLen() {
				continue
			}
			out = append(out, p.Masked())
		}
	}
	return out
}

// acquire makes the host route ip into br-int and answer for it on the uplink, then
// announces it.
func (h *egressHost) acquire(ip netip.Addr) error {
	gw, err := netlink.LinkByName(h.gateway)
	if err != nil {
		return fmt.Errorf("egress IP %s: gateway %s: %w", ip, h.gateway, err)
	}
	uplink, err := uplinkFor(ip, h.gateway)
	if err != nil {
		return err
	}
	hop, fam := serviceNextHop4, netlink.FAMILY_V4
	if ip.Is6() {
		hop, fam = serviceNextHop6, netlink.FAMILY_V6
	}
	if err := netlink.NeighSet(&netlink.Neigh{LinkIndex: gw.Attrs().Index, Family: fam, State: netlink.NUD_PERMANENT,
		IP: hop.AsSlice(), HardwareAddr: serviceNextMAC}); err != nil {
		return fmt.Errorf("egress IP %s: next hop neighbour: %w", ip, err)
	}
	route := &netlink.Route{LinkIndex: gw.Attrs().Index, Dst: ipNet(ip), Gw: hop.AsSlice(), Flags: int(netlink.FLAG_ONLINK),
		Protocol: routeProtoEgress}
	if err := netlink.RouteReplace(route); err != nil {
		return fmt.Errorf("egress IP %s: route into br-int: %w", ip, err)
	}
	if err := proxySysctls(uplink.Name, ip.Is6()); err != nil {
		return fmt.Errorf("egress IP %s: %w", ip, err)
	}
	if err := netlink.NeighSet(&netlink.Neigh{LinkIndex: uplink.Index, Family: fam, Flags: netlink.NTF_PROXY, IP: ip.AsSlice()}); err != nil {
		return fmt.Errorf("egress IP %s: proxy neighbour on %s: %w", ip, uplink.Name, err)
	}
	h.held[ip] = uplink.Name
	announce(uplink, ip)
	return nil
}

// release stops answering for ip and removes its route.
func (h *egressHost) release(ip netip.Addr) {
	fam := netlink.FAMILY_V4
	if ip.Is6() {
		fam = netlink.FAMILY_V6
	}
	if name, ok := h.held[ip]; ok {
		if l, err := netlink.LinkByName(name); err == nil {
			_ = netlink.NeighDel(&netlink.Neigh{LinkIndex: l.Attrs().Index, Family: fam, Flags: netlink.NTF_PROXY, IP: ip.AsSlice()})
		}
	}
	if gw, err := netlink.LinkByName(h.gateway); err == nil {
		_ = netlink.RouteDel(&netlink.Route{LinkIndex: gw.Attrs().Index, Dst: ipNet(ip), Protocol: routeProtoEgress})
	}
	delete(h.held, ip)
	log.WithField("egress-ip", ip).Info("egress IP released")
}

// intact reports whether the host still routes ip into br-int: a restarted ovs-vswitchd
// recreates the gateway port, and the kernel dropped the port's routes with it.
func (h *egressHost) intact(ip netip.Addr) bool {
	gw, err := netlink.LinkByName(h.gateway)
	if err != nil {
		return false
	}
	fam := netlink.FAMILY_V4
	if ip.Is6() {
		fam = netlink.FAMILY_V6
	}
	routes, err := netlink.RouteListFiltered(fam, &netlink.Route{LinkIndex: gw.Attrs().Index, Dst: ipNet(ip)},
		netlink.RT_FILTER_OIF|netlink.RT_FILTER_DST)
	return err == nil && len(routes) > 0
}

// cleanStale removes what an earlier agent set up for egress IPs this one does not hold:
// every route of protocol routeProtoEgress not in keep, and the proxy neighbour entries of
// the Egresses' IPs (known) not in keep (their routes may be gone with an earlier gateway
// port; other proxy entries are not kovs's and stay).
func (h *egressHost) cleanStale(keep, known map[netip.Addr]bool) {
	h.cleanStaleProxies(keep, known)
	for _, fam := range []int{netlink.FAMILY_V4, netlink.FAMILY_V6} {
		routes, err := netlink.RouteListFiltered(fam, &netlink.Route{Protocol: routeProtoEgress}, netlink.RT_FILTER_PROTOCOL)
		if err != nil {
			continue
		}
		for _, r := range routes {
			ip, ok := netip.AddrFromSlice(r.Dst.IP)
			if !ok || keep[ip.Unmap()] {
				continue
			}
			ip = ip.Unmap()
			if uplink, err := uplinkFor(ip, h.gateway); err == nil {
				h.held[ip] = uplink.Name
			}
			h.release(ip)
		}
	}
}

func (h *egressHost) cleanStaleProxies(keep, known map[netip.Addr]bool) {
	links, err := netlink.LinkList()
	if err != nil {
		return
	}
	for _, l := range links {
		for _, fam := range []int{netlink.FAMILY_V4, netlink.FAMILY_V6} {
			entries, err := netlink.NeighProxyList(l.Attrs().Index, fam)
			if err != nil {
				continue
			}
			for _, n := range entries {
				ip, ok := netip.AddrFromSlice(n.IP)
				if ip = ip.Unmap(); !ok || !known[ip] || keep[ip] {
					continue
				}
				_ = netlink.NeighDel(&netlink.Neigh{LinkIndex: l.Attrs().Index, Family: fam, Flags: netlink.NTF_PROXY, IP: n.IP})
				log.WithField("egress-ip", ip).WithField("interface", l.Attrs().Name).Info("stale egress proxy entry removed")
			}
		}
	}
}

func ipNet(ip netip.Addr) *net.IPNet {
	return &net.IPNet{IP: ip.AsSlice(), Mask: net.CIDRMask(ip.BitLen(), ip.BitLen())}
}

// proxySysctls make the uplink answer proxied requests at once (and, IPv6, at all).
func proxySysctls(iface string, v6 bool) error {
	settings := map[string]string{filepath.Join("/proc/sys/net/ipv4/neigh", iface, "proxy_delay"): "0"}
	if v6 {
		settings = map[string]string{filepath.Join("/proc/sys/net/ipv6/neigh", iface, "proxy_delay"): "0",
			filepath.Join("/proc/sys/net/ipv6/conf", iface, "proxy_ndp"): "1"}
	}
	for path, v := range settings {
		if err := os.WriteFile(path, []byte(v), 0o644); err != nil {
			return fmt.Errorf("sysctl %s: %w", path, err)
		}
	}
	return nil
}

// announce tells the uplink's neighbours that ip is at its MAC: three gratuitous ARP
// requests, or unsolicited neighbour advertisements (override) to all nodes, 50 ms apart.
func announce(uplink *net.Interface, ip netip.Addr) {
	l := log.WithField("egress-ip", ip).WithField("interface", uplink.Name)
	var send func() error
	if ip.Is4() {
		c, err := arp.Dial(uplink)
		if err != nil {
			l.WithError(err).Warn("gratuitous ARP")
			return
		}
		defer c.Close()
		p, err := arp.NewPacket(arp.OperationRequest, uplink.HardwareAddr, ip, ethernet.Broadcast, ip)
		if err != nil {
			l.WithError(err).Warn("gratuitous ARP")
			return
		}
		send = func() error { return c.WriteTo(p, ethernet.Broadcast) }
	} else {
		c, _, err := ndp.Listen(uplink, ndp.LinkLocal)
		if err != nil {
			l.WithError(err).Warn("unsolicited neighbour advertisement")
			return
		}
		defer c.Close()
		na := &ndp.NeighborAdvertisement{Override: true, TargetAddress: ip,
			Options: []ndp.Option{&ndp.LinkLayerAddress{Direction: ndp.Target, Addr: uplink.HardwareAddr}}}
		send = func() error { return c.WriteTo(na, nil, netip.IPv6LinkLocalAllNodes()) }
	}
	for i := range 3 {
		if err := send(); err != nil {
			l.WithError(err).Warn("announce the egress IP")
			return
		}
		if i < 2 {
			time.Sleep(50 * time.Millisecond)
		}
	}
	l.Info("egress IP taken and announced")
}
