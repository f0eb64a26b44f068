package pipeline

import (
	"fmt"
	"maps"
	"net/netip"
	"slices"
)

// Priorities of the Service tables.
const (
	prioServiceNodePortPods  = 211 // externalTrafficPolicy Local NodePort traffic from the cluster's pods or the node
	prioServiceNodePort      = 210 // NodePort traffic from the gateway
	prioServiceLB            = 200 // new connections to a ClusterIP:port
	prioEndpointDNAT         = 200 // the chosen endpoint
	prioEndpointDNATFragment = 190 // the chosen endpoint of an affinity port, for a fragment
	prioAffinityMiss         = 100 // no (or a stale) learned endpoint: the group chooses
	prioAffinityLearned      = 200 // learned flows in ServiceAffinity
	prioHairpin              = 200
	prioHairpinEstab         = 197 // ConntrackState: a hairpin connection's later packets (above SCTP, 195)
	prioHairpinReply         = 110 // ConntrackZone: replies to the hairpin SNAT address
	prioHairpinOutput        = 110 // Output: back out the port it came in on
)

// serviceStage is Service load balancing: one object per Service (its ports' flows and
// groups, and the hairpin flows of the local pods that are its endpoints), compiled again
// when the Service's ports change or one of its local endpoint pods does, and one object
// for the node's own hairpin flows while there are Services.
func serviceStage() Stage {
	return Stage{Name: "service", Category: CategoryService, Groups: true,
		Tables:  []Table{ServiceLB, ServiceAffinity, EndpointDNAT, ServiceHairpin, HairpinUnSNAT, SCTPUnNAT, SCTPPin},
		Objects: serviceObjects}
}

// serviceInput is what one Service's flows depend on: its ports (the state's slice,
// replaced whenever they change) and the local pods that are its endpoints.
type serviceInput struct {
	ports []ServicePort
	pods  []PodPort
}

func serviceObjects(s *Snapshot) []Object {
	byIP := map[netip.Addr][]PodPort{}
	for _, pod := range s.Pods {
		for _, ip := range pod.IPs {
			byIP[ip] = append(byIP[ip], pod)
		}
	}
	var objs []Object
	for _, key := range slices.Sorted(maps.Keys(s.Services)) {
		ports := s.Services[key]
		if len(ports) == 0 {
			continue
		}
		in := serviceInput{ports: ports, pods: endpointPods(s.Pods, ports, byIP)}
		objs = append(objs, Object{Key: key, Input: in, Compile: func(b *Builder) (ObjectFlows, error) {
			flows, groups, err := b.ServicePortsFlows(in.ports)
			if err != nil {
				return ObjectFlows{}, err
			}
			return ObjectFlows{Flows: append(flows, b.podHairpinFlows(in.ports, in.pods)...), Groups: groups}, nil
		}})
	}
	if len(objs) > 0 {
		objs = append(objs, Object{Key: "hairpin", Compile: func(b *Builder) (ObjectFlows, error) {
			return ObjectFlows{Flows: b.nodeHairpinFlows()}, nil
		}})
	}
	return objs
}

// endpointPods are the pods (in the snapshot's order) with an address that is an
// endpoint of ports.
func endpointPods(pods []PodPort, ports []ServicePort, byIP map[netip.Addr][]PodPort) []PodPort {
	var hit map[uint32]bool
	for _, p := range ports {
		for _, g := range []ServiceGroup{p.Internal, p.External} {
			for _, ep := range g.Endpoints {
				for _, pod := range byIP[ep.Addr()] {
					if hit == nil {
						hit = map[uint32]bool{}
					}
					hit[pod.OFPort] = true
				}
			}
		}
	}
	if hit == nil {
		return nil
	}
	out := make([]PodPort, 0, len(hit))
	for _, pod := range pods {
		if hit[pod.OFPort] {
			out = append(out, pod)
		}
	}
	return out
}

// ServiceFlows compiles the Service load balancing of the node: per Service port its
// ServiceLB flows, its groups and their endpoints' EndpointDNAT flows, and the hairpin
// flows of the local pods that are endpoints. Ports of a family the node lacks are left
// out. The groups are sorted by ID.
func (b *Builder) ServiceFlows(ports []ServicePort, pods []PodPort) ([]Flow, []Group, error) {
	flows, groups, err := b.ServicePortsFlows(ports)
	if err != nil {
		return nil, nil, err
	}
	return append(flows, b.ServiceHairpinFlows(ports, pods)...), groups, nil
}

// ServicePortsFlows compiles some Service ports (one Service's, say) on their own: their
// flows and groups, sorted by ID, without the node's hairpin flows. A port's flows depend
// only on the port and the builder, so a caller may keep them while the port is unchanged.
func (b *Builder) ServicePortsFlows(ports []ServicePort) ([]Flow, []Group, error) {
	var flows []Flow
	groups := map[uint32]Group{}
	for _, p := range ports {
		if err := p.Validate(); err != nil {
			return nil, nil, fmt.Errorf("service port %q: %w", p.Name, err)
		}
		if !b.node.hasFamily(p.ClusterIP.Is6()) {
			continue
		}
		s := b.owner(CategoryService, ServiceObjectID(p.Name))
		b.servicePortFlows(s, p, groups)
		flows = append(flows, s.flows...)
	}
	flows = append(flows, b.fragmentFlows(ports)...)
	out := make([]Group, 0, len(groups))
	for _, id := range slices.Sorted(maps.Keys(groups)) {
		out = append(out, groups[id])
	}
	return flows, out, nil
}

// ServiceHairpinFlows are the hairpin flows of the local pods that are endpoints of ports
// (none without ports): the node's own (nodeHairpinFlows) and the pods' (podHairpinFlows).
func (b *Builder) ServiceHairpinFlows(ports []ServicePort, pods []PodPort) []Flow {
	if len(ports) == 0 {
		return nil
	}
	return append(b.nodeHairpinFlows(), b.podHairpinFlows(ports, pods)...)
}

// podHairpinFlows are the hairpin flows of the pods that are endpoints of ports: their
// own translation back to themselves, and the stateless SCTP ports' hairpin translations.
func (b *Builder) podHairpinFlows(ports []ServicePort, pods []PodPort) []Flow {
	s := b.owner(CategoryService, 0)
	b.endpointHairpinFlows(s, pods, b.localEndpoints(ports))
	b.statelessHairpinFlows(s, ports, pods)
	return s.flows
}

// localEndpoints are the addresses of the endpoints of ports of the node's families.
func (b *Builder) localEndpoints(ports []ServicePort) map[netip.Addr]bool {
	endpoints := map[netip.Addr]bool{}
	for _, p := range ports {
		if !b.node.hasFamily(p.ClusterIP.Is6()) {
			continue
		}
		for _, g := range []ServiceGroup{p.Internal, p.External} {
			for _, ep := range g.Endpoints {
				endpoints[ep.Addr()] = true
			}
		}
	}
	return endpoints
}

// servicePortFlows adds one Service port's flows to s and its groups to groups.
func (b *Builder) servicePortFlows(s *flowSet, p ServicePort, groups map[uint32]Group) {
	proto := p.protocol()
	newConn := MatchProtocol(proto).CTState(CTNew|CTTracked, 0).IPDst(host(p.ClusterIP))
	if p.Stateless {
		newConn = MatchProtocol(proto).IPDst(host(p.ClusterIP)) // every packet, whatever conntrack says
	}
	var used []ServiceGroup
	if len(p.Internal.Endpoints) > 0 {
		s.add(ServiceLB, prioServiceLB, newConn.TpDst(p.Port, 0xffff), b.balance(p, p.Internal)...)
		used = append(used, p.Internal)
	} else if p.DropWithoutEndpoints {
		s.add(ServiceLB, prioServiceLB, newConn.TpDst(p.Port, 0xffff), Drop{})
	}
	if p.NodePort != 0 {
		m := newConn.Reg(PortClassGateway.Mark()).TpDst(p.NodePort, 0xffff)
		if p.ExternalLocal && len(p.Cluster.Endpoints) > 0 {
			// kube-proxy's short-circuit: externalTrafficPolicy Local keeps only other
			// hosts' clients on the node's own endpoints; a pod's connection (from the
			// cluster CIDR) and the node's own (from one of its addresses, kept: an
			// endpoint elsewhere answers through the tunnel, PeerFlows) go to every
			// endpoint of the cluster.
			sources := slices.Clone(b.node.ClusterCIDRs)
			for _, ip := range b.node.UnderlayIPs {
				if _, inCluster := containing(b.node.ClusterCIDRs, ip); !inCluster && b.node.hasFamily(ip.Is6()) {
					sources = append(sources, host(ip))
				}
			}
			for _, src := range sources {
				if src.Addr().Is6() == p.ClusterIP.Is6() {
					s.add(ServiceLB, prioServiceNodePortPods, m.IPSrc(src), b.balance(p, p.Cluster)...)
					used = append(used, p.Cluster)
				}
			}
		}
		if len(p.External.Endpoints) > 0 {
			s.add(ServiceLB, prioServiceNodePort, m, b.balance(p, p.External)...)
			used = append(used, p.External)
		} else {
			// externalTrafficPolicy Local without a local endpoint: dropped, as
			// kube-proxy does (load balancers' health checks steer clients away).
			s.add(ServiceLB, prioServiceNodePort, m, Drop{})
		}
	}
	// A pod's new connection to an external IP: every usable endpoint of the cluster
	// (kube-proxy short-circuits a pod's traffic to its cluster chain). The host routes
	// no external IP into br-int.
	for _, ip := range p.ExternalIPs {
		if len(p.Cluster.Endpoints) == 0 {
			break // no endpoint: on to the host, which rejects it
		}
		m := MatchProtocol(proto).CTState(CTNew|CTTracked, 0).IPDst(host(ip)).TpDst(p.Port, 0xffff)
		s.add(ServiceLB, prioServiceLB, m, b.balance(p, p.Cluster)...)
		used = append(used, p.Cluster)
	}
	for _, g := range used {
		if _, done := groups[g.ID]; !done {
			groups[g.ID] = b.serviceGroup(s, p, g)
		}
	}
}

// balance are the ServiceLB actions of a Service port's group g: remember the group, then
// let the group choose an endpoint, or with session affinity first look the client's
// learned endpoint up.
func (b *Builder) balance(p ServicePort, g ServiceGroup) []Action {
	load := LoadReg(ServiceGroupField.Mark(g.ID))
	if p.AffinityTimeout == 0 {
		return []Action{load, GroupOutput{ID: g.ID}}
	}
	return []Action{load, Resubmit{Table: ServiceAffinity}, Goto(EndpointDNAT)}
}

// serviceGroup builds group g (one bucket per endpoint: choose it, then translate to it in
// EndpointDNAT, which also learns it for affinity) and adds its endpoints' EndpointDNAT
// flows to s.
func (b *Builder) serviceGroup(s *flowSet, p ServicePort, g ServiceGroup) Group {
	proto := p.protocol()
	group := Group{ID: g.ID, Fields: p.hashFields()}
	eps := slices.Clone(g.Endpoints)
	slices.SortFunc(eps, func(a, b netip.AddrPort) int { return a.Compare(b) })
	eps = slices.Compact(eps)
	// The registers say which port a packet is for, so the flows match any IP packet of
	// the family: a fragment after the first of an IPv6 datagram has nw_proto 44 (its
	// fragment header) to OpenFlow, and would miss a tcp6 or udp6 match (fragmentFlows).
	// What needs the transport protocol matched keeps it: the stateless SCTP rewrite and
	// affinity's learn, which reads the ports; a fragment of an affinity port falls back
	// to the plain translation below it.
	anyIP := MatchProtocol(ipProto(p.ClusterIP))
	for _, ep := range eps {
		key := EndpointKey(ep)
		group.Buckets = append(group.Buckets, []Action{LoadReg(EndpointKeyField.Mark(key)), Resubmit{Table: EndpointDNAT}})
		regs := func(m Match) Match { return m.Reg(EndpointKeyField.Mark(key)).Reg(ServiceGroupField.Mark(g.ID)) }
		dnat := []Action{CT{Commit: true, Zone: CTZone, Recirculate: true, Table: ServiceHairpin, NATDst: ep}}
		switch {
		case p.Stateless:
			s.add(EndpointDNAT, prioEndpointDNAT, regs(MatchProtocol(proto)), b.statelessEndpointActions(p, ep, netip.Addr{})...)
		case p.AffinityTimeout == 0:
			s.add(EndpointDNAT, prioEndpointDNAT, regs(anyIP), dnat...)
		default:
			s.add(EndpointDNAT, prioEndpointDNAT, regs(MatchProtocol(proto)), append([]Action{p.learnAffinity()}, dnat...)...)
			s.add(EndpointDNAT, prioEndpointDNATFragment, regs(anyIP).Fragment(), dnat...)
		}
	}
	if p.AffinityTimeout != 0 && len(eps) > 0 {
		s.add(EndpointDNAT, prioAffinityMiss, anyIP.Reg(ServiceGroupField.Mark(g.ID)), GroupOutput{ID: g.ID})
	}
	return group
}

// learnAffinity is the learn action of the port's session affinity. It runs in the
// endpoint's EndpointDNAT flow, not in the group's bucket: OVS runs a bucket's actions as
// an action set, which has no learn. Every new connection of the client refreshes its flow.
func (p ServicePort) learnAffinity() LearnAffinity {
	return LearnAffinity{Table: ServiceAffinity, Priority: prioAffinityLearned,
		IdleTimeout: p.AffinityTimeout, IPv6: p.ClusterIP.Is6(), IPProto: p.IPProto}
}

// nodeHairpinFlows are the node's part of letting a local pod reach itself through a
// Service: the connection's source becomes the hairpin address (in its own conntrack
// zone), so the pod never sees a packet from itself, and the packet goes back out the
// port it came in on (endpointHairpinFlows). Replies are un-SNATed first, then un-DNATed.
// The node reaching itself through a Service is hairpinned too (hostHairpinFlows).
func (b *Builder) nodeHairpinFlows() []Flow {
	s := b.owner(CategoryService, 0)
	for _, proto := range b.families() {
		snat := hairpinAddr(proto)
		s.add(ConntrackZone, prioHairpinReply, MatchProtocol(proto).IPDst(host(snat)),
			CT{Zone: HairpinCTZone, Recirculate: true, Table: HairpinUnSNAT, NAT: true})
		s.add(HairpinUnSNAT, prioConntrack, MatchProtocol(proto),
			CT{Zone: CTZone, Recirculate: true, Table: ConntrackState, NAT: true})
		// A pod reaching itself is always allowed, as traffic from its node is.
		s.add(IngressPolicy, prioPolicyFromGateway, MatchProtocol(proto).IPSrc(host(snat)), Goto(ConntrackCommit))
	}
	b.hostHairpinFlows(s)
	return s.flows
}

// endpointHairpinFlows send a local pod that is one of endpoints, connecting to its own
// address after the Service's translation, back to itself from the hairpin address.
func (b *Builder) endpointHairpinFlows(s *flowSet, pods []PodPort, endpoints map[netip.Addr]bool) {
	for _, pod := range pods {
		hairpin := false
		for _, ip := range pod.IPs {
			if !endpoints[ip] || !b.node.hasFamily(ip.Is6()) {
				continue
			}
			hairpin = true
			self := MatchProtocol(ipProto(ip)).InPort(pod.OFPort).IPDst(host(ip))
			// A pod reaching itself is always allowed: past egress policy too.
			s.add(ServiceHairpin, prioHairpin, self.CTState(CTNew|CTTracked, 0),
				CT{Commit: true, Zone: HairpinCTZone, Recirculate: true, Table: L3Forwarding, NATSrc: hairpinAddr(ipProto(ip))})
			s.add(ConntrackState, prioHairpinEstab, self.CTState(CTEstablished|CTTracked, CTReply),
				CT{Zone: HairpinCTZone, Recirculate: true, Table: L3Forwarding, NAT: true})
		}
		if hairpin {
			s.add(Output, prioHairpinOutput, MatchAll().Reg(OutPortField.Mark(pod.OFPort)).InPort(pod.OFPort), OutputInPort{})
		}
	}
}

// hostHairpinFlows let the node reach itself through a Service (a host-network endpoint
// on this node): translated to one of its own addresses, the connection is also SNATed
// to the hairpin address, so the host answers through br-int, which undoes both
// translations; the host routes the hairpin address to the gateway.
func (b *Builder) hostHairpinFlows(s *flowSet) {
	fromHost := MatchAll().Reg(PortClassGateway.Mark())
	for _, ip := range b.nodeAddresses() {
		toSelf := fromHost.WithProtocol(ipProto(ip)).IPDst(host(ip))
		s.add(ServiceHairpin, prioHairpin, toSelf.CTState(CTNew|CTTracked|CTDNAT, 0),
			CT{Commit: true, Zone: HairpinCTZone, Recirculate: true, Table: L3Forwarding, NATSrc: hairpinAddr(ipProto(ip))})
		s.add(ConntrackState, prioHairpinEstab, toSelf.CTState(CTEstablished|CTTracked|CTDNAT, CTReply),
			CT{Zone: HairpinCTZone, Recirculate: true, Table: L3Forwarding, NAT: true})
	}
}

func hairpinAddr(proto Protocol) netip.Addr {
	if proto == ProtoIPv6 {
		return HairpinSNATv6
	}
	return HairpinSNATv4
}
