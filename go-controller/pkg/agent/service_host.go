package agent

import (
	"bytes"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"slices"
	"strings"

	log "github.com/sirupsen/logrus"
	"github.com/vishvananda/netlink"

	"github.com/kovs-net/kovs/go-controller/pkg/pipeline"
)

// The host side of Services, in the node's network namespace:
//
//   - a route per ClusterIP into br-int through the gateway port (via a next hop that only
//     exists as a permanent neighbour entry), so the node itself and NodePort traffic reach
//     the ServiceLB table;
//   - nftables table inet kovs-services: NodePort DNAT (node address:nodePort ->
//     ClusterIP:nodePort, where br-int's NodePort flows pick the endpoint), masquerade to the
//     gateway address for externalTrafficPolicy Cluster (replies then come back through this
//     node), and a reject (TCP reset, ICMP port unreachable) of connections to Service ports
//     without endpoints, which br-int hands to the host, and to ClusterIPs on ports that
//     are no Service port.
const (
	serviceNFTable = "kovs-services"
	// routeProtoKovs marks the routes this file owns (rtnetlink protocol number).
	routeProtoKovs = netlink.RouteProtocol(201)
)

// Next hops of the ClusterIP routes: addresses nobody has, resolved by permanent neighbour
// entries to a MAC br-int ignores (it routes by IP).
var (
	serviceNextHop4 = netip.MustParseAddr("169.254.0.1")
	serviceNextHop6 = netip.MustParseAddr("fe80::6b6f:7673")
	serviceNextMAC  = net.HardwareAddr{0x0a, 0x58, 0xa9, 0xfe, 0x00, 0x01}
)

// serviceHost programs the node's host networking for Services.
type serviceHost struct {
	gateway  string
	mtu      int
	families map[bool]bool // ipv6 -> the node has pods of the family
	lastNFT  string
	lastVIPs map[netip.Addr]bool
	tables   *hostTables
	// cleanedNodePorts are the UDP NodePorts whose untranslated host conntrack entries were
	// deleted once their rules were written (service_host_conntrack.go);
	// deleteNodePortEntries deletes them (nil: in the host's conntrack, over netlink).
	cleanedNodePorts      map[nodePortFrontend]bool
	deleteNodePortEntries func([]nodePortFrontend) (uint, error)
}

// serviceHostHook is what the node's host networking does when Services change.
func (a *Agent) serviceHostHook() func(map[string][]pipeline.ServicePort, bool) {
	node, err := a.nodes.Get(a.cfg.NodeName)
	if err != nil {
		return nil
	}
	blocks, _ := nodeSubnets(node)
	h := &serviceHost{gateway: a.cfg.GatewayName, mtu: a.mtu, families: map[bool]bool{}, tables: a.tables}
	for _, b := range blocks {
		h.families[b.Addr().Is6()] = true
	}
	if _, err := exec.LookPath("nft"); err != nil {
		log.WithError(err).Warn("nft not found: NodePorts are not served and Services without endpoints time out instead of rejecting")
	}
	return h.sync
}

// sync brings the routes and the nftables table in line with the Services; full rewrites
// them even if the Services did not change.
func (h *serviceHost) sync(all map[string][]pipeline.ServicePort, full bool) {
	if full {
		h.lastNFT, h.lastVIPs, h.cleanedNodePorts = "", nil, nil
	}
	var ports []pipeline.ServicePort
	for _, key := range slices.Sorted(maps.Keys(all)) {
		for _, p := range all[key] {
			if h.families[p.ClusterIP.Is6()] {
				ports = append(ports, p)
			}
		}
	}
	if err := h.syncRoutes(ports); err != nil {
		log.WithError(err).Warn("service routes")
	}
	script := h.nftScript(ports)
	if script != h.lastNFT {
		if err := h.tables.write(script); err != nil {
			if !errors.Is(err, errHostTablesRemoved) {
				log.WithError(err).Warn("service nftables rules")
			}
			return
		}
		h.lastNFT = script
	}
	h.cleanNodePortEntries(ports)
}

// nftScript is the whole table, replaced atomically.
func (h *serviceHost) nftScript(ports []pipeline.ServicePort) string {
	var dnat, masq, reject []string
	vips, known := map[string][]string{}, map[string][]string{} // by nftables family
	for _, p := range ports {
		fam, l4 := "ip", protoName(p.IPProto)
		vip := p.ClusterIP.String()
		if p.ClusterIP.Is6() {
			fam, vip = "ip6", "["+vip+"]"
		}
		vips[fam] = append(vips[fam], p.ClusterIP.String())
		known[fam] = append(known[fam], fmt.Sprintf("%s . %s . %d", p.ClusterIP, l4, p.Port))
		if p.NodePort != 0 {
			dnat = append(dnat, fmt.Sprintf("meta nfproto %s %s dport %d fib daddr type local %s daddr != %s dnat %s to %s:%d",
				nfproto(fam), l4, p.NodePort, fam, loopback(fam), fam, vip, p.NodePort))
			if !p.ExternalLocal {
				masq = append(masq, fmt.Sprintf("%s daddr %s %s dport %d ct status dnat masquerade", fam, p.ClusterIP, l4, p.NodePort))
			}
		}
		how := "reject with tcp reset"
		if p.IPProto != pipeline.IPProtoTCP {
			how = "reject"
		}
		if len(p.Internal.Endpoints) == 0 && !p.DropWithoutEndpoints {
			reject = append(reject, fmt.Sprintf("%s daddr %s %s dport %d %s", fam, p.ClusterIP, l4, p.Port, how))
		}
		if p.NodePort != 0 && !hasAnyEndpoint(p) {
			// NodePort traffic, DNATed above, of a port without endpoints anywhere: rejected
			// as kube-proxy does, on its first pass through the host (br-int would hand it
			// back, and the client would wait for its timeout).
			reject = append(reject, fmt.Sprintf("%s daddr %s %s dport %d %s", fam, p.ClusterIP, l4, p.NodePort, how))
		}
		if len(p.Cluster.Endpoints) == 0 {
			// A pod's connection to an external IP without endpoints, as kube-proxy
			// rejects it (br-int hands it to the host untranslated).
			for _, ip := range p.ExternalIPs {
				reject = append(reject, fmt.Sprintf("%s daddr %s %s dport %d %s", fam, ip, l4, p.Port, how))
			}
		}
	}
	var b strings.Builder
	b.WriteString(deleteTableScript(serviceNFTable))
	fmt.Fprintf(&b, "table inet %s {\n", serviceNFTable)
	// Numeric priorities: nft 1.0.6 refuses the "dstnat" keyword in an output hook.
	chain(&b, "nodeport_dnat", "type nat hook prerouting priority -100", dnat)
	chain(&b, "nodeport_dnat_local", "type nat hook output priority -100", dnat)
	chain(&b, "nodeport_snat", "type nat hook postrouting priority 100", prefix("oifname \""+h.gateway+"\" ", masq))
	unknown := unknownPorts(vips, known)
	forward := slices.Concat(reject, unknown, h.loopedToClusterIPs(vips))
	chain(&b, "no_endpoints", "type filter hook forward priority 0", forward)
	chain(&b, "no_endpoints_local", "type filter hook output priority 0", append(reject, unknown...))
	b.WriteString("}\n")
	return b.String()
}

// hasAnyEndpoint reports whether the port has a usable endpoint on any node, as far as its
// groups tell: External holds them all under externalTrafficPolicy Cluster, Cluster under
// Local (a stateless port has no Cluster group: it counts as having one).
func hasAnyEndpoint(p pipeline.ServicePort) bool {
	if !p.ExternalLocal {
		return len(p.External.Endpoints) > 0
	}
	return p.Cluster.ID == 0 || len(p.Cluster.Endpoints) > 0
}

// unknownPorts reject connections to a ClusterIP on a port that is no port of its
// Service: br-int has no ServiceLB flow for them and hands a pod's to the host, which
// routes it back to br-int, which drops it (it never sends a packet back out the port it
// came in on); the node's own would go the same way. The client would wait for its
// timeout; kube-proxy's nftables mode rejects these too. Traffic the host DNATed (NodePorts
// to ClusterIP:nodePort) is let through first. known are "<ClusterIP> . <proto> . <port>"
// by nftables family, vips the ClusterIPs.
func unknownPorts(vips, known map[string][]string) []string {
	if len(vips) == 0 {
		return nil
	}
	rules := []string{"ct status dnat accept"}
	for _, fam := range slices.Sorted(maps.Keys(vips)) {
		set := func(elems []string) string {
			return "{ " + strings.Join(slices.Compact(slices.Sorted(slices.Values(elems))), ", ") + " }"
		}
		m := fmt.Sprintf("%s daddr %s %s daddr . meta l4proto . th dport != %s ", fam, set(vips[fam]), fam, set(known[fam]))
		rules = append(rules, m+"meta l4proto tcp reject with tcp reset", m+"reject")
	}
	return rules
}

// loopedToClusterIPs drop what br-int hands the host for a ClusterIP with endpoints (the
// rules before them reject the ports without endpoints and accept what the host DNATed):
// only a pod's packet that followed a conntrack entry made while the port had no
// endpoints (service_conntrack.go deletes it) comes this way. Routed back into br-int
// (the ClusterIP's route), a copy still in flight when the entry is deleted starts a new
// connection from the gateway port, committed as the host's (pipeline.CTMarkFromGateway,
// whose replies go to the host), and the pod's flow, answered once, then stays
// unanswered: seen in 3 of 7 runs of UDPFlowFollowsEndpoints' busy flow without these
// rules (test/e2e/services), in none with them. vips are the ClusterIPs by nftables family.
func (h *serviceHost) loopedToClusterIPs(vips map[string][]string) []string {
	var rules []string
	for _, fam := range slices.Sorted(maps.Keys(vips)) {
		set := "{ " + strings.Join(slices.Compact(slices.Sorted(slices.Values(vips[fam]))), ", ") + " }"
		rules = append(rules, fmt.Sprintf("iifname %q oifname %q %s daddr %s drop", h.gateway, h.gateway, fam, set))
	}
	return rules
}

func chain(b *strings.Builder, name, hook string, rules []string) {
	fmt.Fprintf(b, "  chain %s {\n    %s; policy accept;\n", name, hook)
	for _, r := range rules {
		b.WriteString("    " + r + "\n")
	}
	b.WriteString("  }\n")
}

func prefix(p string, rules []string) []string {
	out := make([]string, len(rules))
	for i, r := range rules {
		out[i] = p + r
	}
	return out
}

func nfproto(fam string) string {
	if fam == "ip6" {
		return "ipv6"
	}
	return "ipv4"
}

func loopback(fam string) string {
	if fam == "ip6" {
		return "::1"
	}
	return "127.0.0.0/8"
}

func protoName(p uint8) string {
	switch p {
	case pipeline.IPProtoUDP:
		return "udp"
	case pipeline.IPProtoSCTP:
		return "sctp"
	}
	return "tcp"
}

func runNFT(script string) error {
	cmd := exec.Command("nft", "-f", "-")
	cmd.Stdin = strings.NewReader(script)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("nft -f: %w: %s", err, strings.TrimSpace(out.String()))
	}
	return nil
}

// syncRoutes routes every ClusterIP into br-int through the gateway port and removes the
// routes of ClusterIPs that are gone.
func (h *serviceHost) syncRoutes(ports []pipeline.ServicePort) error {
	want := map[netip.Addr]bool{}
	for _, p := range ports {
		want[p.ClusterIP] = true
	}
	// The node's connections to itself through a Service come back from the hairpin
	// address (pipeline.hostHairpinFlows): answers to it go to br-int, which undoes it.
	if len(ports) > 0 {
		for v6, ok := range h.families {
			if ok && v6 {
				want[pipeline.HairpinSNATv6] = true
			} else if ok {
				want[pipeline.HairpinSNATv4] = true
			}
		}
	}
	if h.lastVIPs != nil && maps.Equal(want, h.lastVIPs) {
		return nil
	}
	link, err := netlink.LinkByName(h.gateway)
	if err != nil {
		return fmt.Errorf("gateway %s: %w", h.gateway, err)
	}
	// br-int hands the host's own connections to a ClusterIP back to it when the endpoint
	// is no pod (a host-network pod elsewhere): from the host's own address.
	acceptLocal := "/proc/sys/net/ipv4/conf/" + h.gateway + "/accept_local"
	if err := os.WriteFile(acceptLocal, []byte("1"), 0o644); err != nil {
		log.WithError(err).Warn("accept_local on the gateway: the node cannot reach host-network endpoints of Services")
	}
	for _, v6 := range []bool{false, true} {
		if !h.families[v6] {
			continue
		}
		hop := serviceNextHop4
		if v6 {
			hop = serviceNextHop6
		}
		neigh := &netlink.Neigh{LinkIndex: link.Attrs().Index, State: netlink.NUD_PERMANENT, IP: hop.AsSlice(), HardwareAddr: serviceNextMAC,
			Family: netlink.FAMILY_V4}
		if v6 {
			neigh.Family = netlink.FAMILY_V6
		}
		if err := netlink.NeighSet(neigh); err != nil {
			return fmt.Errorf("neighbour %s on %s: %w", hop, h.gateway, err)
		}
	}
	have, err := netlink.RouteListFiltered(netlink.FAMILY_ALL, &netlink.Route{LinkIndex: link.Attrs().Index, Protocol: routeProtoKovs},
		netlink.RT_FILTER_OIF|netlink.RT_FILTER_PROTOCOL)
	if err != nil {
		return fmt.Errorf("list routes: %w", err)
	}
	current := map[netip.Addr]netlink.Route{}
	for _, r := range have {
		if r.Dst == nil {
			continue
		}
		a, ok := netip.AddrFromSlice(r.Dst.IP)
		if !ok {
			continue
		}
		if !want[a.Unmap()] {
			if err := netlink.RouteDel(&r); err != nil {
				log.WithError(err).WithField("route", r.Dst).Warn("remove service route")
			}
			continue
		}
		current[a.Unmap()] = r
	}
	for vip := range want {
		hop := serviceNextHop4
		if vip.Is6() {
			hop = serviceNextHop6
		}
		r := &netlink.Route{LinkIndex: link.Attrs().Index, Dst: &net.IPNet{IP: vip.AsSlice(), Mask: net.CIDRMask(vip.BitLen(), vip.BitLen())},
			Gw: hop.AsSlice(), Protocol: routeProtoKovs, MTU: h.mtu, Flags: int(netlink.FLAG_ONLINK)}
		if have, ok := current[vip]; ok && sameServiceRoute(have, *r) {
			continue
		}
		if err := netlink.RouteReplace(r); err != nil {
			return fmt.Errorf("route %s via %s: %w", vip, h.gateway, err)
		}
	}
	h.lastVIPs = want
	return nil
}

// sameServiceRoute reports whether the host's route have is already the ClusterIP route
// want, so that syncRoutes leaves it alone. Replacing an IPv6 route with an identical one
// is not a no-op as it is for IPv4: the kernel announces it (RTM_NEWROUTE), and
// ovs-vswitchd, which follows the host's routes for its tunnels, then flushes its route
// table and reads it back; a packet whose upcall falls in between finds no route to its
// tunnel peer and is dropped. Every hostResync on every dual-stack or IPv6 node did that
// (seen as SYNs of one node's pods to other nodes lost at once, answered only after their
// retransmission, in the dual-stack truth table).
func sameServiceRoute(have, want netlink.Route) bool {
	return have.LinkIndex == want.LinkIndex && have.Gw.Equal(want.Gw) && have.MTU == want.MTU &&
		have.Flags&int(netlink.FLAG_ONLINK) == want.Flags&int(netlink.FLAG_ONLINK)
}

// removeServiceHost undoes what serviceHost programmed (an earlier run with
// --service-proxy=kovs): the nftables table and the ClusterIP routes.
func removeServiceHost(gateway string, tables *hostTables) {
	if _, err := exec.LookPath("nft"); err == nil {
		if err := tables.write(deleteTableScript(serviceNFTable)); err != nil {
			log.WithError(err).Warn("remove the kovs-services nftables table")
		}
	}
	removeServiceRoutes(gateway)
}

// removeServiceRoutes removes the ClusterIP routes serviceHost added through the gateway.
func removeServiceRoutes(gateway string) {
	h := &serviceHost{gateway: gateway, families: map[bool]bool{}}
	if err := h.syncRoutes(nil); err != nil {
		log.WithError(err).Warn("remove the Service routes")
	}
}
