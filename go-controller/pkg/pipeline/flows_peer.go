package pipeline

import (
	"fmt"
	"net/netip"
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
// its underlay address, its pod subnets are routed into the tunnel towards it, and the
// host's ARP requests and neighbour solicitations for addresses in them are answered
// with its gateway's MAC (so the node routes the cluster CIDRs over the gateway port
// however its routes are written: on-link, or via the remote gateway).
func (b *Builder) PeerFlows(peer TunnelPeer) ([]Flow, error) {
	if err := peer.validate(b.node); err != nil {
		return nil, fmt.Errorf("tunnel peer %q: %w", peer.NodeName, err)
	}
	s := b.owner(CategoryTunnelPeer, PeerObjectID(peer.NodeName))
	fromPeer := MatchAll().InPort(b.node.TunnelOFPort).TunID(TunnelVNI).TunSrc(peer.UnderlayIP)
	s.add(Classifier, prioClassify, fromPeer, LoadReg(PortClassTunnel.Mark()), Goto(ConntrackZone))
	for _, subnet := range peer.PodSubnets {
		if !b.node.hasFamily(subnet.Addr().Is6()) {
			return nil, fmt.Errorf("tunnel peer %q: pod subnet %s: the local node has no pod subnet of its family", peer.NodeName, subnet)
		}
		peerProxyFlows(s, peer, subnet)
		route := MatchProtocol(ipProto(subnet.Addr())).IPDst(subnet)
		s.add(L3Forwarding, prioL3Remote, route, b.toPeer(peer)...)
	}
	return s.flows, nil
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
