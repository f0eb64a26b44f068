package pipeline

import (
	"net/netip"
	"slices"
)

// Priorities of the fragment flows in ServiceLB (below the port flows, which a fragment
// never matches: its ports are 0 to OpenFlow, and no Service port is 0).
const (
	prioServiceFragment        = 190 // fragments of a new connection to a ClusterIP
	prioServiceFragmentGateway = 195 // the same from the gateway port, where NodePorts count too
)

// fragmentTarget is where a port's flow sends a new connection: its group (and the
// port's affinity, which makes the actions differ), a drop, or nowhere (no flow).
type fragmentTarget struct {
	group    uint32
	affinity uint16
	drop     bool
	port     int // the port whose balance the target's actions are (index in ports)
}

func (t fragmentTarget) same(o fragmentTarget) bool {
	return t.group == o.group && t.affinity == o.affinity && t.drop == o.drop
}

func (t fragmentTarget) none() bool { return t.group == 0 && !t.drop }

// fragmentFlows send the fragments of a new connection to a ClusterIP where the port
// flows send its unfragmented packets. OpenFlow sees a fragment's L4 ports as 0 (OVS's
// normal fragment handling), and on the userspace datapath ct() goes on with the
// fragments, not with the datagram it reassembled, so no port flow matches them; each
// later ct() in the node's zone reassembles them again, translates the datagram as the
// last fragment's path asks, and hands every fragment that translation (see
// ovs-flows/README.md). Later fragments carry no port at all, so fragments are sent by
// ClusterIP and protocol only: where every port of that protocol they may be for agrees
// (one port, or ports balanced by the same group); from the gateway port the NodePorts
// count too. Where the ports disagree the fragments miss, as before. The protocol is
// matched as conntrack's (ct_nw_proto): OVS parses an IPv6 later fragment's nw_proto as
// 44, its fragment header, so it never matches udp6 or tcp6.
func (b *Builder) fragmentFlows(ports []ServicePort) []Flow {
	type key struct {
		ip    netip.Addr
		proto uint8
	}
	byKey := map[key][]int{}
	var keys []key
	for i, p := range ports {
		if p.Stateless || !b.node.hasFamily(p.ClusterIP.Is6()) {
			continue
		}
		k := key{p.ClusterIP, p.IPProto}
		if _, seen := byKey[k]; !seen {
			keys = append(keys, k)
		}
		byKey[k] = append(byKey[k], i)
	}
	var flows []Flow
	for _, k := range keys {
		idx := byKey[k]
		first := ports[idx[0]]
		s := b.owner(CategoryService, ServiceObjectID(first.Name))
		// The protocol as conntrack knows it: an IPv6 later fragment's nw_proto is 44.
		m := MatchProtocol(ipProto(k.ip)).CTState(CTNew|CTTracked, 0).CTNwProto(k.proto).IPDst(host(k.ip)).Fragment()
		var internal, gateway []fragmentTarget
		for _, i := range idx {
			t := internalTarget(ports[i], i)
			internal = append(internal, t)
			gateway = append(gateway, t)
			if ports[i].NodePort != 0 {
				gateway = append(gateway, externalTarget(ports[i], i))
			}
		}
		in, inOK := agreed(internal)
		if inOK && !in.none() {
			s.add(ServiceLB, prioServiceFragment, m, b.fragmentActions(ports, in)...)
		}
		gw, gwOK := agreed(gateway)
		switch {
		case gwOK && inOK && gw.same(in):
			// The flow above serves the gateway's fragments as well.
		case gwOK && !gw.none():
			s.add(ServiceLB, prioServiceFragmentGateway, m.Reg(PortClassGateway.Mark()), b.fragmentActions(ports, gw)...)
		case inOK && !in.none():
			// The gateway's fragments may be for a port the flow above is not: they miss.
			s.add(ServiceLB, prioServiceFragmentGateway, m.Reg(PortClassGateway.Mark()), Goto(EgressPolicy))
		}
		flows = append(flows, s.flows...)
	}
	return flows
}

// internalTarget is where port p's ClusterIP flow sends a new connection.
func internalTarget(p ServicePort, i int) fragmentTarget {
	switch {
	case len(p.Internal.Endpoints) > 0:
		return fragmentTarget{group: p.Internal.ID, affinity: p.AffinityTimeout, port: i}
	case p.DropWithoutEndpoints:
		return fragmentTarget{drop: true, port: i}
	}
	return fragmentTarget{port: i}
}

// externalTarget is where port p's NodePort flow sends a new connection.
func externalTarget(p ServicePort, i int) fragmentTarget {
	if len(p.External.Endpoints) > 0 {
		return fragmentTarget{group: p.External.ID, affinity: p.AffinityTimeout, port: i}
	}
	return fragmentTarget{drop: true, port: i}
}

// agreed is the one target all of targets are, if they agree.
func agreed(targets []fragmentTarget) (fragmentTarget, bool) {
	if slices.ContainsFunc(targets, func(t fragmentTarget) bool { return !t.same(targets[0]) }) {
		return fragmentTarget{}, false
	}
	return targets[0], true
}

// fragmentActions are the ServiceLB actions of target t: its port's balance, or a drop.
func (b *Builder) fragmentActions(ports []ServicePort, t fragmentTarget) []Action {
	if t.drop {
		return []Action{Drop{}}
	}
	p := ports[t.port]
	return b.balance(p, ServiceGroup{ID: t.group})
}
