package agent

import (
	"net/netip"
	"slices"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"

	"github.com/kovs-net/kovs/go-controller/pkg/pipeline"
)

// defaultAffinityTimeout is sessionAffinityConfig.clientIP.timeoutSeconds' API default.
const defaultAffinityTimeout = 10800

// maxAffinityTimeout is the longest idle timeout an OpenFlow flow takes (16 bits); the API
// allows up to 86400 s, which kovs shortens to this.
const maxAffinityTimeout = 65535

// serviceEndpoint is one endpoint of a Service port, from an EndpointSlice.
type serviceEndpoint struct {
	addr        netip.AddrPort
	local       bool
	ready       bool
	serving     bool
	terminating bool
	// zoneHints and nodeHints are the slice's hints.forZones and hints.forNodes names.
	zoneHints, nodeHints []string
	// inTopology: Cluster-policy traffic of this node may use it (markTopology).
	inTopology bool
}

// groupIDs hands out stable group IDs, one per Service port, family and traffic kind.
type groupIDs interface {
	groupID(key string) uint32
}

// servicePorts turns a Service and its EndpointSlices into the datapath's Service ports:
// one per port and ClusterIP family. SCTP ports go through conntrack NAT only when sctp
// is set (the kernel datapath); otherwise (the userspace datapath, whose conntrack cannot
// NAT SCTP, see docs/services.md) they are translated statelessly, ClusterIP only, without
// a NodePort. Headless and ExternalName Services have none. Cluster-policy traffic follows
// the endpoints' topology hints for self (markTopology); Local-policy traffic does not, as
// with kube-proxy.
func servicePorts(svc *corev1.Service, slices []*discoveryv1.EndpointSlice, self proxyNode, ids groupIDs, sctp bool) []pipeline.ServicePort {
	if svc.Spec.Type == corev1.ServiceTypeExternalName {
		return nil
	}
	var out []pipeline.ServicePort
	for _, ipText := range clusterIPs(svc) {
		vip, err := netip.ParseAddr(ipText)
		if err != nil {
			continue // "None" (headless) or garbage
		}
		for _, sp := range svc.Spec.Ports {
			proto, ok := ipProtocol(sp.Protocol)
			if !ok {
				continue
			}
			eps := endpointsOf(slices, sp, vip.Is6(), self.name)
			markTopology(eps, self)
			p := servicePort(svc, sp, vip, proto, eps, ids)
			if proto == pipeline.IPProtoSCTP && !sctp {
				// Translated without conntrack (see pipeline/flows_sctp_service.go). The
				// host's own (kernel) conntrack still DNATs its NodePort to the ClusterIP.
				p.Stateless, p.Listed = true, listed(eps)
				p.ExternalIPs, p.Cluster = nil, pipeline.ServiceGroup{} // not translated without conntrack
			}
			if proto == pipeline.IPProtoUDP {
				p.Serving = servingEndpoints(eps)
			}
			out = append(out, p)
		}
	}
	return out
}

func clusterIPs(svc *corev1.Service) []string {
	if len(svc.Spec.ClusterIPs) > 0 {
		return svc.Spec.ClusterIPs
	}
	if svc.Spec.ClusterIP != "" {
		return []string{svc.Spec.ClusterIP}
	}
	return nil
}

func ipProtocol(p corev1.Protocol) (uint8, bool) {
	switch p {
	case corev1.ProtocolTCP, "":
		return pipeline.IPProtoTCP, true
	case corev1.ProtocolUDP:
		return pipeline.IPProtoUDP, true
	case corev1.ProtocolSCTP:
		return pipeline.IPProtoSCTP, true
	}
	return 0, false
}

// servicePort builds one Service port of one family from its endpoints.
func servicePort(svc *corev1.Service, sp corev1.ServicePort, vip netip.Addr, proto uint8, eps []serviceEndpoint, ids groupIDs) pipeline.ServicePort {
	portName := sp.Name
	if portName == "" {
		portName = strconv.Itoa(int(sp.Port))
	}
	name := pipeline.ServicePortName(svc.Namespace, svc.Name, portName, string(sp.Protocol))
	family := "4"
	if vip.Is6() {
		family = "6"
	}
	p := pipeline.ServicePort{Name: name, ClusterIP: vip, IPProto: proto, Port: uint16(sp.Port)}
	internalLocal := svc.Spec.InternalTrafficPolicy != nil && *svc.Spec.InternalTrafficPolicy == corev1.ServiceInternalTrafficPolicyLocal
	p.Internal = pipeline.ServiceGroup{ID: ids.groupID(name + "/" + family + "/internal"), Endpoints: usable(eps, internalLocal)}
	// internalTrafficPolicy Local with endpoints elsewhere only: dropped, not rejected.
	p.DropWithoutEndpoints = internalLocal && len(p.Internal.Endpoints) == 0 && len(usable(eps, false)) > 0
	p.External = p.Internal
	if hasNodePort(svc) && sp.NodePort > 0 {
		p.NodePort = uint16(sp.NodePort)
		if svc.Spec.ExternalTrafficPolicy == corev1.ServiceExternalTrafficPolicyLocal {
			p.ExternalLocal = true
			p.External = pipeline.ServiceGroup{ID: ids.groupID(name + "/" + family + "/external"), Endpoints: usable(eps, true)}
		} else if internalLocal {
			p.External = pipeline.ServiceGroup{ID: ids.groupID(name + "/" + family + "/external"), Endpoints: usable(eps, false)}
		}
	}
	p.ExternalIPs = externalIPs(svc, vip.Is6())
	if len(p.ExternalIPs) > 0 || p.ExternalLocal {
		switch {
		case !internalLocal:
			p.Cluster = p.Internal
		case p.NodePort != 0 && !p.ExternalLocal:
			p.Cluster = p.External
		default:
			p.Cluster = pipeline.ServiceGroup{ID: ids.groupID(name + "/" + family + "/cluster"), Endpoints: usable(eps, false)}
		}
	}
	if svc.Spec.SessionAffinity == corev1.ServiceAffinityClientIP {
		timeout := int32(defaultAffinityTimeout)
		if c := svc.Spec.SessionAffinityConfig; c != nil && c.ClientIP != nil && c.ClientIP.TimeoutSeconds != nil {
			timeout = *c.ClientIP.TimeoutSeconds
		}
		p.AffinityTimeout = uint16(min(max(timeout, 1), maxAffinityTimeout))
	}
	return p
}

// externalIPs are the Service's spec.externalIPs of one family, sorted, once each
// (anything that does not parse is left out: the API server validates them).
func externalIPs(svc *corev1.Service, ipv6 bool) []netip.Addr {
	var out []netip.Addr
	for _, text := range svc.Spec.ExternalIPs {
		ip, err := netip.ParseAddr(text)
		if err != nil || ip.Zone() != "" {
			continue
		}
		ip = ip.Unmap()
		if ip.Is6() == ipv6 {
			out = append(out, ip)
		}
	}
	slices.SortFunc(out, netip.Addr.Compare)
	return slices.Compact(out)
}

func hasNodePort(svc *corev1.Service) bool {
	return svc.Spec.Type == corev1.ServiceTypeNodePort || svc.Spec.Type == corev1.ServiceTypeLoadBalancer
}

// usable picks the endpoints new connections may go to, as kube-proxy does: the ready
// ones (of this node only, when local; else those of this node's topology); if there are
// none, the serving ones that are terminating, so a Service whose every pod is shutting
// down still answers. (Topology never empties the ready ones: topologyMode falls back to
// every endpoint when the hints leave this node none.)
func usable(eps []serviceEndpoint, local bool) []netip.AddrPort {
	var ready, terminating []netip.AddrPort
	for _, e := range eps {
		if local && !e.local {
			continue
		}
		switch {
		case e.ready:
			if local || e.inTopology {
				ready = append(ready, e.addr)
			}
		case e.serving && e.terminating:
			terminating = append(terminating, e.addr)
		}
	}
	if len(ready) == 0 {
		ready = terminating
	}
	slices.SortFunc(ready, func(a, b netip.AddrPort) int { return a.Compare(b) })
	return slices.Compact(ready)
}

// servingEndpoints are the addresses of the endpoints whose condition is serving, on any node,
// sorted, once each: the ones kube-proxy keeps UDP conntrack entries to.
func servingEndpoints(eps []serviceEndpoint) []netip.AddrPort {
	var out []netip.AddrPort
	for _, e := range eps {
		if e.serving {
			out = append(out, e.addr)
		}
	}
	slices.SortFunc(out, func(a, b netip.AddrPort) int { return a.Compare(b) })
	return slices.Compact(out)
}

// listed are the endpoints' addresses whatever their conditions, sorted, once each.
func listed(eps []serviceEndpoint) []netip.AddrPort {
	var out []netip.AddrPort
	for _, e := range eps {
		out = append(out, e.addr)
	}
	slices.SortFunc(out, func(a, b netip.AddrPort) int { return a.Compare(b) })
	return slices.Compact(out)
}

// endpointsOf collects the endpoints of Service port sp of one family: each slice names
// its ports, so a named targetPort resolves to whatever number each pod gave it.
func endpointsOf(list []*discoveryv1.EndpointSlice, sp corev1.ServicePort, ipv6 bool, node string) []serviceEndpoint {
	want := discoveryv1.AddressTypeIPv4
	if ipv6 {
		want = discoveryv1.AddressTypeIPv6
	}
	var out []serviceEndpoint
	for _, s := range list {
		if s.AddressType != want {
			continue
		}
		port, ok := slicePort(s, sp)
		if !ok {
			continue
		}
		for _, e := range s.Endpoints {
			if len(e.Addresses) == 0 {
				continue
			}
			ip, err := netip.ParseAddr(e.Addresses[0])
			if err != nil || ip.Is6() != ipv6 {
				continue
			}
			c := e.Conditions
			zones, nodes := endpointHints(e.Hints)
			out = append(out, serviceEndpoint{
				zoneHints:   zones,
				nodeHints:   nodes,
				addr:        netip.AddrPortFrom(ip, port),
				local:       e.NodeName != nil && *e.NodeName == node,
				ready:       c.Ready == nil || *c.Ready,
				serving:     c.Serving == nil || *c.Serving,
				terminating: c.Terminating != nil && *c.Terminating,
			})
		}
	}
	return out
}

// slicePort is the slice's port number for Service port sp (matched by name and protocol).
func slicePort(s *discoveryv1.EndpointSlice, sp corev1.ServicePort) (uint16, bool) {
	for _, p := range s.Ports {
		name := ""
		if p.Name != nil {
			name = *p.Name
		}
		proto := corev1.ProtocolTCP
		if p.Protocol != nil {
			proto = *p.Protocol
		}
		spProto := sp.Protocol
		if spProto == "" {
			spProto = corev1.ProtocolTCP
		}
		if name == sp.Name && proto == spProto && p.Port != nil && *p.Port > 0 && *p.Port < 65536 {
			return uint16(*p.Port), true
		}
	}
	return 0, false
}
