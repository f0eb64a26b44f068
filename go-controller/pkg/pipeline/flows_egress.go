package pipeline

import (
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strconv"
)

// Egress IPs (the Egress resource, docs/egress.md). A local pod an Egress selects sends
// what leaves the cluster not to the gateway (where the node would masquerade it) but:
//
//   - through the tunnel to the node holding the Egress, with tun_id TunnelID (65536 +
//     the Egress's ID) instead of the pods' VNI, when another node holds it;
//   - to the gateway port with EgressID set, when this node holds it;
//   - nowhere (dropped) while no node holds it: it never leaves with another source.
//
// The holder admits tunnel packets with an Egress's key from known peers (Classifier,
// loading EgressID), hands them to the gateway port (L3Forwarding 195, above the no-transit
// drop) and translates their source to the egress IP in ConntrackCommit
// (ct(commit,nat(src=EIP),table=Output)) in the node's zone; replies are un-NATed by
// ConntrackZone's ct(nat) and routed back to the pod like any reply. The host routes the
// egress IPs into br-int over the gateway port and answers ARP/ND for them on its uplink
// (agent, egress_host.go). Destinations a selected pod reaches without its Egress (every
// node's addresses, the no-masquerade CIDRs) keep the ordinary route (70).

// EgressState is the node's share of the Egresses.
type EgressState struct {
	// Exclude are the destinations selected pods reach as usual: every node's addresses
	// and the no-masquerade CIDRs (the cluster CIDRs never leave anyway).
	Exclude []netip.Prefix
	// Pods are the local pods an Egress selects, by ofport.
	Pods []EgressPod
	// Held are the Egresses this node holds, by ID.
	Held []HeldEgress
	// Peers are the nodes whose tunnel packets may carry an Egress's key (all tunnel
	// peers' endpoints), sorted.
	Peers []netip.Addr
}

// EgressPod is a local pod with the Egress that selects it.
type EgressPod struct {
	OFPort uint32
	// Families are the pod's address families its Egress has an IP of (false: IPv4).
	Families []bool
	// ID is the Egress's; 0 while it has no holder (or none yet).
	ID uint32
	// Local: this node holds the Egress. Otherwise HolderIP and HolderMAC are the holder's
	// tunnel endpoint and gateway MAC, or zero while no node holds it.
	Local     bool
	HolderIP  netip.Addr
	HolderMAC net.HardwareAddr
}

// HeldEgress is an Egress this node holds.
type HeldEgress struct {
	ID  uint32
	IPs []netip.Addr
}

// EgressTunnelIDBase plus an Egress's ID is the tunnel key of its traffic to the holder
// (egress.TunnelIDBase).
const EgressTunnelIDBase uint64 = 1 << 16

const (
	prioEgressClassify = prioClassify
	prioEgressCluster  = 196 // L3Forwarding: an Egress's tunnel packet for a cluster address: drop
	prioEgressFromPeer = 195 // L3Forwarding: an Egress's tunnel packet, off to the gateway
	prioEgressExclude  = 70  // L3Forwarding: selected pods to node addresses, routed networks
	prioEgressPod      = 60  // L3Forwarding: a selected pod's traffic leaving the cluster
	prioEgressSNAT     = 120 // ConntrackCommit: translate to the egress IP
	prioEgressReturn   = 190 // Classifier: the holder's packets for local pods, from any source
)

// egressStage compiles the Egress flows: one object for the exclusions (while a local pod
// is selected), one per selected pod (its ofport), one per held Egress (held/<id>).
func egressStage() Stage {
	return Stage{Name: "egress", Category: CategoryEgress, Objects: func(s *Snapshot) []Object {
		e := s.Egress
		if e == nil {
			return nil
		}
		var objs []Object
		if len(e.Pods) > 0 {
			in := struct {
				Exclude []netip.Prefix
				Holders []netip.Addr
			}{e.Exclude, egressHolders(e.Pods)}
			objs = append(objs, Object{Key: "exclude", Input: in, Compile: func(b *Builder) (ObjectFlows, error) {
				return ObjectFlows{Flows: append(b.egressExcludeFlows(in.Exclude), b.egressReturnFlows(in.Holders)...)}, nil
			}})
		}
		for _, p := range e.Pods {
			objs = append(objs, Object{Key: "pod/" + strconv.Itoa(int(p.OFPort)), Input: p, Compile: func(b *Builder) (ObjectFlows, error) {
				flows, err := b.egressPodFlows(p)
				return ObjectFlows{Flows: flows}, err
			}})
		}
		sources := egressPeerSources(e.Peers, s.Peers)
		for _, h := range e.Held {
			in := struct {
				Held    HeldEgress
				Sources []egressPeerSource
			}{h, sources}
			objs = append(objs, Object{Key: "held/" + strconv.Itoa(int(h.ID)), Input: in, Compile: func(b *Builder) (ObjectFlows, error) {
				return ObjectFlows{Flows: b.egressHeldFlows(h, sources)}, nil
			}})
		}
		return objs
	}}
}

// EgressIDMark is EgressID = id.
func EgressIDMark(id uint32) RegMark { return EgressIDField.Mark(id) }

func (b *Builder) egressExcludeFlows(exclude []netip.Prefix) []Flow {
	s := b.owner(CategoryEgress, 0)
	for _, p := range exclude {
		if b.node.hasFamily(p.Addr().Is6()) {
			s.add(L3Forwarding, prioEgressExclude, MatchProtocol(ipProto(p.Addr())).Reg(PortClassPod.Mark()).IPDst(p), b.toGateway()...)
		}
	}
	return s.flows
}

// egressHolders are the tunnel endpoints of the other nodes holding the Egresses of local
// pods, sorted.
func egressHolders(pods []EgressPod) []netip.Addr {
	var out []netip.Addr
	for _, p := range pods {
		if p.HolderIP.IsValid() && !slices.Contains(out, p.HolderIP) {
			out = append(out, p.HolderIP)
		}
	}
	slices.SortFunc(out, func(a, b netip.Addr) int { return a.Compare(b) })
	return out
}

// egressReturnFlows admit what a holder sends to this node's pods with any inner source:
// the replies to its Egresses' traffic come from outside the cluster, un-NATed to the
// pod's address by the holder, so Classifier's check that a peer's packets come from its
// own pods and addresses would drop them. Only the holders of local pods' Egresses are let
// through, only towards this node's pod blocks; what they send is then judged like any
// packet (a reply to the pod's connection, or NetworkPolicy for a new one).
func (b *Builder) egressReturnFlows(holders []netip.Addr) []Flow {
	s := b.owner(CategoryEgress, 0)
	for _, h := range holders {
		for _, block := range b.node.PodSubnets {
			s.add(Classifier, prioEgressReturn, MatchAll().InPort(b.node.TunnelOFPort).TunID(TunnelVNI).TunSrc(h).
				WithProtocol(ipProto(block.Addr())).IPDst(block), LoadReg(PortClassTunnel.Mark()), Goto(ConntrackZone))
		}
	}
	return s.flows
}

func (b *Builder) egressPodFlows(p EgressPod) ([]Flow, error) {
	if uint64(p.ID) >= EgressTunnelIDBase || (p.ID == 0 && (p.Local || p.HolderIP.IsValid())) {
		return nil, fmt.Errorf("egress pod ofport %d: Egress ID %d is out of range", p.OFPort, p.ID)
	}
	s := b.owner(CategoryEgress, p.OFPort)
	for _, v6 := range p.Families {
		if !b.node.hasFamily(v6) {
			continue
		}
		proto := ProtoIPv4
		if v6 {
			proto = ProtoIPv6
		}
		m := MatchProtocol(proto).Reg(PortClassPod.Mark()).InPort(p.OFPort)
		switch {
		case p.Local:
			s.add(L3Forwarding, prioEgressPod, m, append([]Action{LoadReg(EgressIDMark(p.ID))}, b.toGateway()...)...)
		case p.HolderIP.IsValid():
			if err := validateMAC(p.HolderMAC); err != nil {
				return nil, fmt.Errorf("egress pod ofport %d: holder gateway MAC: %w", p.OFPort, err)
			}
			s.add(L3Forwarding, prioEgressPod, m, SetEthSrc(b.node.GatewayMAC), SetEthDst(p.HolderMAC), SetTunDst(p.HolderIP),
				SetTunID(EgressTunnelIDBase+uint64(p.ID)), LoadReg(OutPortField.Mark(b.node.TunnelOFPort)), Goto(L3DecTTL))
		default:
			s.add(L3Forwarding, prioEgressPod, m, Drop{})
		}
	}
	return s.flows, nil
}

// egressPeerSource is a peer whose tunnel packets may carry an Egress's key, with the inner
// sources they may have: its pod blocks (only pods are selected by an Egress).
type egressPeerSource struct {
	Peer       netip.Addr
	PodSubnets []netip.Prefix
}

// egressPeerSources pairs each Egress peer with its pod blocks from the tunnel peers; a
// peer that is no tunnel peer (yet) has none, so nothing of its is admitted.
func egressPeerSources(peers []netip.Addr, tunnelPeers []TunnelPeer) []egressPeerSource {
	out := make([]egressPeerSource, 0, len(peers))
	for _, p := range peers {
		src := egressPeerSource{Peer: p}
		for _, tp := range tunnelPeers {
			if tp.UnderlayIP == p {
				src.PodSubnets = append(src.PodSubnets, tp.PodSubnets...)
			}
		}
		out = append(out, src)
	}
	return out
}

func (b *Builder) egressHeldFlows(h HeldEgress, sources []egressPeerSource) []Flow {
	n := b.node
	s := b.owner(CategoryEgress, uint32(EgressTunnelIDBase)+h.ID)
	mark := EgressIDMark(h.ID)
	for _, src := range sources {
		key := MatchAll().InPort(n.TunnelOFPort).TunID(EgressTunnelIDBase + uint64(h.ID)).TunSrc(src.Peer)
		for _, subnet := range src.PodSubnets {
			if !n.hasFamily(subnet.Addr().Is6()) {
				continue
			}
			s.add(Classifier, prioEgressClassify, key.WithProtocol(ipProto(subnet.Addr())).IPSrc(subnet),
				LoadReg(PortClassTunnel.Mark()), LoadReg(mark), Goto(ConntrackZone))
		}
	}
	for _, ip := range h.IPs {
		if !n.hasFamily(ip.Is6()) {
			continue
		}
		proto := ipProto(ip)
		fromPeer := MatchProtocol(proto).Reg(PortClassTunnel.Mark()).Reg(mark)
		for _, c := range n.ClusterCIDRs {
			if c.Addr().Is6() == ip.Is6() {
				s.add(L3Forwarding, prioEgressCluster, fromPeer.IPDst(c), Drop{})
			}
		}
		s.add(L3Forwarding, prioEgressFromPeer, fromPeer, b.toGateway()...)
		s.add(ConntrackCommit, prioEgressSNAT, MatchProtocol(proto).CTState(CTNew|CTTracked, 0).Reg(mark).Reg(OutPortField.Mark(n.GatewayOFPort)),
			CT{Commit: true, Zone: CTZone, NATSrc: ip, Recirculate: true, Table: Output})
	}
	return s.flows
}
