package pipeline

import (
	"cmp"
	"errors"
	"fmt"
	"hash/fnv"
	"net/netip"
	"slices"
	"strconv"

	"github.com/kovs-net/kovs/go-controller/pkg/ovs"
)

// ServiceGroupBase is the first OpenFlow group ID kovs uses for Services: group IDs of
// the form 0x06xxxxxx (the Service cookie category in the top byte) are kovs's, so a full
// resync can tell its own stale groups from anyone else's.
const ServiceGroupBase uint32 = uint32(CategoryService) << 24

// ServiceGroupMask selects the owner byte of a group ID.
const ServiceGroupMask uint32 = 0xff000000

// IsServiceGroup reports whether kovs owns group id.
func IsServiceGroup(id uint32) bool { return id&ServiceGroupMask == ServiceGroupBase }

// Hairpin SNAT: a pod that reaches itself through a Service sees the connection come
// from these addresses (never from its own), in their own conntrack zone.
var (
	HairpinSNATv4 = netip.MustParseAddr("169.254.0.253")
	HairpinSNATv6 = netip.MustParseAddr("fd00:6b6f:7673::fd")
)

// HairpinCTZone is the conntrack zone of the hairpin source translation.
const HairpinCTZone uint16 = 65521

// ServicePort is one port of one Service in one IP family, as br-int implements it: new
// connections to ClusterIP:Port (and, from the gateway, to ClusterIP:NodePort, where the
// node's host networking sends NodePort traffic) go to one endpoint of a group.
type ServicePort struct {
	// Name identifies the port: "<namespace>/<service>:<port name or number>/<protocol>".
	Name      string
	ClusterIP netip.Addr
	IPProto   uint8 // IPProtoTCP, IPProtoUDP or IPProtoSCTP
	Port      uint16
	NodePort  uint16 // 0: none
	// Internal serves traffic to the ClusterIP (all endpoints, or only the node's own with
	// internalTrafficPolicy Local); External serves NodePort traffic (only the node's own
	// endpoints with externalTrafficPolicy Local). They may be the same group.
	Internal ServiceGroup
	External ServiceGroup
	// ExternalIPs are spec.externalIPs of the ClusterIP's family: a pod's new connection
	// to one of them on Port is balanced over Cluster, as kube-proxy sends a pod's
	// traffic to an external IP to every endpoint whatever the traffic policies. Not for
	// stateless ports.
	ExternalIPs []netip.Addr
	// Cluster is every usable endpoint of the cluster (the same group as Internal or
	// External when one of them holds them all): for ExternalIPs, and with ExternalLocal
	// for NodePort traffic from the cluster's pods and the node itself (kube-proxy's
	// short-circuit). Unset (ID 0) otherwise.
	Cluster ServiceGroup
	// AffinityTimeout is sessionAffinity ClientIP's timeout in seconds; 0: no affinity.
	AffinityTimeout uint16
	// DropWithoutEndpoints drops new connections to the ClusterIP while Internal has no
	// endpoints (internalTrafficPolicy Local with endpoints on other nodes only), instead
	// of handing them to the host, which rejects them.
	DropWithoutEndpoints bool
	// ExternalLocal is externalTrafficPolicy Local: NodePort traffic keeps the client's
	// source address (the host does not masquerade it) and External holds only the
	// node's own endpoints.
	ExternalLocal bool
	// Stateless translates the port without conntrack, with set_field and a learned
	// reverse flow (flows_sctp_service.go): SCTP on the userspace datapath, whose
	// conntrack cannot NAT SCTP ports. Only for SCTP.
	Stateless bool
	// Listed are the endpoints the port's EndpointSlices list, whatever their conditions
	// (stateless ports only): the learned translations of associations to a listed
	// endpoint live on; the agent deletes those of an endpoint no longer listed
	// (SCTPTranslationFilter).
	Listed []netip.AddrPort
	// Serving are the endpoints whose condition is serving (ready, or terminating and
	// still serving), whatever the traffic policies (UDP ports only). No flow uses them:
	// the agent deletes the UDP conntrack entries of the port's frontends answered by any
	// other address (agent/service_conntrack.go), as kube-proxy does.
	Serving []netip.AddrPort
}

// ServiceGroup is the endpoints one select group balances over.
type ServiceGroup struct {
	ID        uint32 // a ServiceGroupBase group ID
	Endpoints []netip.AddrPort
}

// Group is one OpenFlow select group of br-int, rendered as dump-groups prints it.
type Group struct {
	ID      uint32
	Fields  []string // the hash fields of selection_method=hash
	Buckets [][]Action
}

// String renders the group as `ovs-ofctl -O OpenFlow15 dump-groups` prints it (without the
// leading space); `group add` takes the same text.
func (g Group) String() string { return g.Rendered().String() }

// Rendered is the group as the switch holds it: a select group, hashing Fields when
// there are any, with one bucket per entry of Buckets (IDs from 0).
func (g Group) Rendered() ovs.Group {
	out := ovs.Group{ID: g.ID, Type: "select", Fields: g.Fields}
	if len(g.Fields) > 0 {
		out.Method = "hash"
	}
	for i, actions := range g.Buckets {
		out.Buckets = append(out.Buckets, ovs.Bucket{ID: uint32(i), Actions: formatActions(actions)})
	}
	return out
}

// ServicePortName names a Service port as ServicePort.Name does:
// "<namespace>/<service>:<port name, or number when unnamed>/<protocol>" (protocol as the
// API spells it, TCP when empty). kovsctl names Service flows by it.
func ServicePortName(namespace, service, port, protocol string) string {
	if protocol == "" {
		protocol = "TCP"
	}
	return namespace + "/" + service + ":" + port + "/" + protocol
}

// ServiceObjectID is the cookie object of a Service port's flows: FNV-1a of its name.
func ServiceObjectID(name string) uint32 { return PeerObjectID(name) }

// EndpointKey is the EndpointKey register value of an endpoint: FNV-1a of ip:port, never
// 0 (0 is "no endpoint chosen"). Keys depend only on the endpoint, so an affinity learned
// before an endpoint change still names the same endpoint after it.
func EndpointKey(ep netip.AddrPort) uint32 {
	h := fnv.New32a()
	h.Write([]byte(ep.String()))
	if k := h.Sum32(); k != 0 {
		return k
	}
	return 1
}

// Validate checks a Service port for what its flows rely on.
func (p ServicePort) Validate() error {
	if p.Name == "" {
		return errors.New("no name")
	}
	if !p.ClusterIP.IsValid() || p.ClusterIP.Zone() != "" || p.ClusterIP.Is4In6() {
		return fmt.Errorf("cluster IP %q is not a plain address", p.ClusterIP)
	}
	switch p.IPProto {
	case IPProtoTCP, IPProtoUDP, IPProtoSCTP:
	default:
		return fmt.Errorf("IP protocol %d is not TCP, UDP or SCTP", p.IPProto)
	}
	if p.Port == 0 {
		return errors.New("port 0")
	}
	if p.Stateless && p.IPProto != IPProtoSCTP {
		return errors.New("stateless translation is for SCTP ports only")
	}
	for _, ip := range p.ExternalIPs {
		if !ip.IsValid() || ip.Zone() != "" || ip.Is4In6() || ip.Is6() != p.ClusterIP.Is6() {
			return fmt.Errorf("external IP %q is not a plain address of the cluster IP's family", ip)
		}
	}
	if len(p.ExternalIPs) > 0 && p.Stateless {
		return errors.New("external IPs of a stateless port")
	}
	groups := []ServiceGroup{p.Internal, p.External}
	if len(p.ExternalIPs) > 0 || p.Cluster.ID != 0 || len(p.Cluster.Endpoints) > 0 {
		groups = append(groups, p.Cluster)
	}
	for _, g := range groups {
		if !IsServiceGroup(g.ID) {
			return fmt.Errorf("group %#x is not a Service group", g.ID)
		}
		for _, ep := range g.Endpoints {
			if !ep.IsValid() || ep.Port() == 0 || ep.Addr().Is6() != p.ClusterIP.Is6() {
				return fmt.Errorf("endpoint %s is not an address and port of the cluster IP's family", ep)
			}
		}
	}
	return nil
}

// protocol is the transport shorthand of the port (tcp, udp6, ...).
func (p ServicePort) protocol() Protocol {
	proto, _ := TransportProtocol(p.IPProto, p.ClusterIP.Is6())
	return proto
}

// hashFields are the fields a Service group hashes to pick a bucket: addresses and ports.
func (p ServicePort) hashFields() []string {
	src, dst := "ip_src", "ip_dst"
	if p.ClusterIP.Is6() {
		src, dst = "ipv6_src", "ipv6_dst"
	}
	l4 := map[uint8]string{IPProtoTCP: "tcp", IPProtoUDP: "udp", IPProtoSCTP: "sctp"}[p.IPProto]
	return []string{src, dst, l4 + "_src", l4 + "_dst"}
}

// SortServicePorts orders ports by name, then family, for stable output.
func SortServicePorts(ports []ServicePort) {
	slices.SortFunc(ports, func(a, b ServicePort) int {
		return cmp.Or(cmp.Compare(a.Name, b.Name), cmp.Compare(strconv.FormatBool(a.ClusterIP.Is6()), strconv.FormatBool(b.ClusterIP.Is6())))
	})
}
