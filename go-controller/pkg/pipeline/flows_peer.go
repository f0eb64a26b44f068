package pipeline

import (
	"fmt"
	"net/netip"
	"slices"
)

// tunnelPeerStage is the tunnel peers' flows (PeerFlows): one object per peer, keyed by
// its node name.
func tunnelPeerStage() Stage {
	return Stage{Name: "tunnel peer", Category: CategoryTunnelPeer, Objects: func(s *Snapshot) []Object {
		objs := make([]Object, len(s.Peers))
		for i, peer := range s.Peers {
			objs[i] = Object{Key: peer.NodeName, Input: peer, Compile: func(b *Builder) (ObjectFlows, error) {
				flows, err := b.PeerFlows(peer)
				return ObjectFlows{Flows: flows}, err
			}}
		}
		return objs
	}}
}

// PeerFlows are the flows of one remote node: the classifier admits tunnel packets from
// its underlay address whose inner source is the peer's (tunnelSources), its pod subnets
// are routed into the tunnel towards it, and the host's ARP requests and neighbour
// solicitations for addresses in them are answered with its gateway's MAC (so the node
// routes the cluster CIDRs over the gateway port however its routes are written:
// on-link, or via the remote gateway).
func (b *Builder) PeerFlows(peer TunnelPeer) ([]Flow, error) {
	if err := peer.Validate(b.node); err != nil {
		return nil, fmt.Errorf("tunnel peer %q: %w", peer.NodeName, err)
	}
	s := b.owner(CategoryTunnelPeer, PeerObjectID(peer.NodeName))
	fromPeer := MatchAll().InPort(b.node.TunnelOFPort).TunID(TunnelVNI).TunSrc(peer.UnderlayIP)
	for _, src := range b.tunnelSources(peer) {
		s.add(Classifier, prioClassify, fromPeer.WithProtocol(ipProto(src.Addr())).IPSrc(src),
			LoadReg(PortClassTunnel.Mark()), Goto(ConntrackZone))
	}
	for _, subnet := range peer.PodSubnets {
		peerProxyFlows(s, peer, subnet)
		route := MatchProtocol(ipProto(subnet.Addr())).IPDst(subnet)
		s.add(L3Forwarding, prioL3Remote, route, b.toPeer(peer)...)
	}
	// A reply to the peer's host network (its node addresses) goes back through the
	// tunnel, the way the connection came: the peer's br-int may have translated it (its
	// node's own connection to a NodePort, sent to an endpoint here) and must undo that,
	// which the peer's host, reached over the underlay, cannot.
	for _, ip := range append([]netip.Addr{peer.UnderlayIP}, peer.NodeIPs...) {
		if b.node.hasFamily(ip.Is6()) {
			s.add(L3Forwarding, prioL3PeerReply, MatchProtocol(ipProto(ip)).CTState(CTReply|CTTracked, 0).IPDst(host(ip)), b.toPeer(peer)...)
		}
	}
	return s.flows, nil
}

// tunnelSources are the inner sources the peer's packets may have, of the local node's
// families: its pod subnets (its pods, its gateway, and the addresses its host
// masquerades NodePort traffic to) and its node addresses (its host network). A packet
// with any other inner source is forged, by the peer or by whoever sends from its
// underlay address, and the classifier drops it.
func (b *Builder) tunnelSources(peer TunnelPeer) []netip.Prefix {
	var out []netip.Prefix
	add := func(p netip.Prefix) {
		if b.node.hasFamily(p.Addr().Is6()) && !slices.Contains(out, p) {
			out = append(out, p)
		}
	}
	for _, subnet := range peer.PodSubnets {
		add(subnet)
	}
	for _, ip := range append([]netip.Addr{peer.UnderlayIP}, peer.NodeIPs...) {
		add(host(ip))
	}
	return out
}

// peerProxyFlows answer the host (gateway port) for addresses in the peer's subnet.
func peerProxyFlows(s *flowSet, peer TunnelPeer, subnet netip.Prefix) {
	fromGateway := PortClassGateway.Mark()
	if subnet.Addr().Is4() {
		request := MatchProtocol(ProtoARP).Reg(fromGateway).ARPOp(arpOpRequest).ARPTpa(subnet)
		s.add(ARPResponder, prioNeighborReply, request, arpReplyActions(peer.GatewayMAC)...)
		return
	}
	solicit := solicitationMatch().Reg(fromGateway).NDTarget(subnet)
	s.add(NDResponder, prioNeighborReply, solicit, advertiseActions(peer.GatewayMAC, naSolicited|naOverride)...)
	s.add(NDReply, prioNeighborReply, advertisementMatch().NDTarget(subnet), replyActions(peer.GatewayMAC)...)
}

// toPeer routes a packet to the peer's gateway through the tunnel.
func (b *Builder) toPeer(peer TunnelPeer) []Action {
	return []Action{
		SetEthSrc(b.node.GatewayMAC),
		SetEthDst(peer.GatewayMAC),
		SetTunDst(peer.UnderlayIP),
		SetTunID(TunnelVNI),
		LoadReg(OutPortField.Mark(b.node.TunnelOFPort)),
		Goto(L3DecTTL),
	}
}
