package agent

import (
	"fmt"
	"net/netip"
	"slices"

	log "github.com/sirupsen/logrus"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/kovs-net/kovs/go-controller/pkg/pipeline"
)

// Untranslated UDP NodePort entries in the host's conntrack. A UDP datagram to a NodePort
// that reaches the node before the agent has written the port's DNAT rule (the Service is
// new, or the agent is starting) meets no rule: the host delivers it to itself, where
// nothing listens, and answers port unreachable. Its conntrack entry in the host's table
// has no NAT, and a client that keeps sending from one port keeps it alive: every later
// datagram follows it past the new rule and is refused for as long as the client sends
// (seen in CI: TestServicesIPv6/UDPFlowFollowsEndpoints, a NodePort flow refused for 30 s
// after its endpoint came). kube-proxy deletes these too (pkg/proxy/conntrack: entries to
// a UDP NodePort not answered by an endpoint). Once the rules of a UDP NodePort are
// written, the agent deletes the host's UDP entries to a local address on that port that
// were not translated to the port's ClusterIP; br-int's zone (service_conntrack.go) then
// takes the flow. Translated entries stay: the endpoint is chosen in br-int.

// nodePortFrontend is a UDP NodePort and the ClusterIP the host translates it to.
type nodePortFrontend struct {
	ClusterIP netip.Addr
	NodePort  uint16
}

// udpNodePorts are the UDP NodePort frontends among ports.
func udpNodePorts(ports []pipeline.ServicePort) map[nodePortFrontend]bool {
	out := map[nodePortFrontend]bool{}
	for _, p := range ports {
		if p.IPProto == pipeline.IPProtoUDP && p.NodePort != 0 {
			out[nodePortFrontend{ClusterIP: p.ClusterIP, NodePort: p.NodePort}] = true
		}
	}
	return out
}

// untranslatedNodePortFilter matches the host's UDP conntrack entries to a local address
// on one of the NodePorts whose answers do not come from the port's ClusterIP.
type untranslatedNodePortFilter struct {
	local     map[netip.Addr]bool
	frontends map[uint16][]netip.Addr // NodePort -> ClusterIPs
}

func newUntranslatedNodePortFilter(local []netip.Addr, frontends []nodePortFrontend) untranslatedNodePortFilter {
	f := untranslatedNodePortFilter{local: map[netip.Addr]bool{}, frontends: map[uint16][]netip.Addr{}}
	for _, a := range local {
		f.local[a.Unmap()] = true
	}
	for _, fe := range frontends {
		f.frontends[fe.NodePort] = append(f.frontends[fe.NodePort], fe.ClusterIP)
	}
	return f
}

// MatchConntrackFlow is netlink.CustomConntrackFilter's.
func (f untranslatedNodePortFilter) MatchConntrackFlow(flow *netlink.ConntrackFlow) bool {
	if flow.Forward.Protocol != unix.IPPROTO_UDP {
		return false
	}
	vips, ok := f.frontends[flow.Forward.DstPort]
	if !ok {
		return false
	}
	dst, ok := netip.AddrFromSlice(flow.Forward.DstIP)
	if !ok || !f.local[dst.Unmap()] {
		return false
	}
	answerer, _ := netip.AddrFromSlice(flow.Reverse.SrcIP)
	return !slices.Contains(vips, answerer.Unmap())
}

// deleteUntranslatedNodePortEntries deletes the host's untranslated UDP entries to
// frontends (in the calling goroutine's network namespace: the node's); it returns how
// many it deleted.
func deleteUntranslatedNodePortEntries(frontends []nodePortFrontend) (uint, error) {
	addrs, err := netlink.AddrList(nil, netlink.FAMILY_ALL)
	if err != nil {
		return 0, fmt.Errorf("list the node's addresses: %w", err)
	}
	var local []netip.Addr
	for _, a := range addrs {
		if ip, ok := netip.AddrFromSlice(a.IP); ok && !ip.Unmap().IsLoopback() {
			local = append(local, ip.Unmap())
		}
	}
	filter := newUntranslatedNodePortFilter(local, frontends)
	var total uint
	for _, family := range []netlink.InetFamily{unix.AF_INET, unix.AF_INET6} {
		if !slices.ContainsFunc(frontends, func(fe nodePortFrontend) bool { return fe.ClusterIP.Is6() == (family == unix.AF_INET6) }) {
			continue
		}
		n, err := netlink.ConntrackDeleteFilters(netlink.ConntrackTable, family, filter)
		total += n
		if err != nil {
			return total, fmt.Errorf("delete untranslated UDP NodePort conntrack entries: %w", err)
		}
	}
	return total, nil
}

// cleanNodePortEntries deletes the untranslated host entries of the UDP NodePorts among
// ports whose rules are written now and were not at the last cleanup (all of them after
// a full sync); a failure leaves them for the next sync.
func (h *serviceHost) cleanNodePortEntries(ports []pipeline.ServicePort) {
	now := udpNodePorts(ports)
	var fresh []nodePortFrontend
	for fe := range now {
		if !h.cleanedNodePorts[fe] {
			fresh = append(fresh, fe)
		}
	}
	if len(fresh) == 0 {
		h.cleanedNodePorts = now
		return
	}
	deleteEntries := h.deleteNodePortEntries
	if deleteEntries == nil {
		deleteEntries = deleteUntranslatedNodePortEntries
	}
	if n, err := deleteEntries(fresh); err != nil {
		log.WithError(err).Warn("untranslated UDP NodePort conntrack entries (again at the next Service sync)")
		for _, fe := range fresh {
			delete(now, fe)
		}
	} else if n > 0 {
		log.WithField("deleted", n).Info("deleted the host's untranslated UDP NodePort conntrack entries")
	}
	h.cleanedNodePorts = now
}
