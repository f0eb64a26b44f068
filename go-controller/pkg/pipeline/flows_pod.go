package pipeline

import (
	"fmt"
	"net"
	"net/netip"
	"strconv"
)

// linkLocal is fe80::/10: link-local addresses, which L3Forwarding never routes.
func linkLocal() netip.Prefix { return netip.MustParsePrefix("fe80::/10") }

// LinkLocalAddress is the link-local address of an interface with mac, its modified
// EUI-64 interface identifier (RFC 4291): the one a pod's eth0 gets (kovs-cni sets its
// address generation mode to EUI-64), and the only link-local source the pod may use.
func LinkLocalAddress(mac net.HardwareAddr) netip.Addr {
	var a [16]byte
	a[0], a[1] = 0xfe, 0x80
	if len(mac) == 6 {
		a[8], a[9], a[10], a[11], a[12] = mac[0]^0x02, mac[1], mac[2], 0xff, 0xfe
		a[13], a[14], a[15] = mac[3], mac[4], mac[5]
	}
	return netip.AddrFrom16(a)
}

// noLinkLayer is the nd_sll / nd_tll value of an ND message without that option.
func noLinkLayer() net.HardwareAddr { return net.HardwareAddr{0, 0, 0, 0, 0, 0} }

// podStage is the local pods' flows (PodFlows): one object per pod, keyed by its ofport
// (the cookie's object), compiled again when the pod's port changes.
func podStage() Stage {
	return Stage{Name: "pod", Category: CategoryPod, Objects: func(s *Snapshot) []Object {
		objs := make([]Object, len(s.Pods))
		for i, pod := range s.Pods {
			objs[i] = Object{Key: strconv.FormatUint(uint64(pod.OFPort), 10), Input: pod,
				Compile: func(b *Builder) (ObjectFlows, error) {
					flows, err := b.PodFlows(pod)
					return ObjectFlows{Flows: flows}, err
				}}
		}
		return objs
	}}
}

// PodFlows are the flows of one local pod: classification, the spoof guard that lets it
// send only from its MAC and addresses, delivery of ARP/ND addressed to it, and routing of
// its addresses to its port.
func (b *Builder) PodFlows(pod PodPort) ([]Flow, error) {
	if err := pod.validate(b.node); err != nil {
		return nil, fmt.Errorf("pod %s: %w", pod, err)
	}
	s := b.owner(CategoryPod, pod.OFPort)
	classify := []Action{LoadReg(PortClassPod.Mark()), Goto(SpoofGuard)}
	if pod.EgressMeter != 0 {
		// The pod's egress bandwidth: every packet it sends passes its meter first.
		classify = append([]Action{Meter{ID: pod.EgressMeter}}, classify...)
	}
	s.add(Classifier, prioClassify, MatchAll().InPort(pod.OFPort), classify...)
	for _, ip := range pod.IPs {
		if ip.Is4() {
			podIPv4Flows(s, pod, ip)
		} else {
			podIPv6Flows(s, pod, ip)
		}
		s.add(L3Forwarding, prioL3Local, MatchProtocol(ipProto(ip)).IPDst(host(ip)), b.toPod(pod)...)
	}
	if hasIPv6(pod.IPs) {
		podLinkLocalFlows(s, pod)
	}
	if pod.IngressMeter != 0 {
		// The pod's ingress bandwidth: what is output to it passes its meter last.
		s.add(Output, prioOutputMetered, MatchAll().Reg(OutPortField.Mark(pod.OFPort)),
			Meter{ID: pod.IngressMeter}, OutputReg{Field: OutPortField})
	}
	return s.flows, nil
}

// podIPv4Flows: the pod sends IPv4 and ARP only from its MAC and ip; ARP requests for ip
// and ARP replies to its MAC are delivered to it.
func podIPv4Flows(s *flowSet, pod PodPort, ip netip.Addr) {
	from := MatchAll().InPort(pod.OFPort).EthSrc(pod.MAC)
	s.add(SpoofGuard, prioSpoofSource, from.WithProtocol(ProtoARP).ARPSpa(host(ip)).ARPSha(pod.MAC), Goto(ARPResponder))
	s.add(SpoofGuard, prioSpoofSource, from.WithProtocol(ProtoIPv4).IPSrc(host(ip)), Goto(ConntrackZone))
	toPod := OutputPort{Port: pod.OFPort}
	s.add(ARPResponder, prioNeighborForward, MatchProtocol(ProtoARP).ARPOp(arpOpRequest).ARPTpa(host(ip)), toPod)
	s.add(ARPResponder, prioNeighborForward, MatchProtocol(ProtoARP).ARPOp(arpOpReply).EthDst(pod.MAC), toPod)
}

// podIPv6Flows: the pod sends IPv6 only from its MAC and ip; its solicitations carry its
// MAC, its advertisements are for ip with its MAC (or no option); solicitations for ip
// are delivered to it.
func podIPv6Flows(s *flowSet, pod PodPort, ip netip.Addr) {
	from := MatchAll().InPort(pod.OFPort).EthSrc(pod.MAC)
	s.add(SpoofGuard, prioSpoofSource, from.WithProtocol(ProtoIPv6).IPSrc(host(ip)), Goto(NDResponder))
	nd := from.WithProtocol(ProtoICMPv6).IPSrc(host(ip))
	s.add(SpoofGuard, prioSpoofND, nd.ICMPv6Type(ndNeighborSolicit).NDSLL(pod.MAC), Goto(NDResponder))
	advert := nd.ICMPv6Type(ndNeighborAdvert).NDTarget(host(ip))
	s.add(SpoofGuard, prioSpoofND, advert.NDTLL(pod.MAC), Goto(NDResponder))
	s.add(SpoofGuard, prioSpoofND, advert.NDTLL(noLinkLayer()), Goto(NDResponder))
	solicit := MatchProtocol(ProtoICMPv6).ICMPv6Type(ndNeighborSolicit).NDTarget(host(ip))
	s.add(NDResponder, prioNeighborForward, solicit, OutputPort{Port: pod.OFPort})
}

// podLinkLocalFlows: the pod may send IPv6, and solicit, from its own link-local address
// (LinkLocalAddress: kernels solicit from it), never from another; L3Forwarding routes no
// link-local traffic, so what passes here is neighbour discovery. Advertisements
// addressed to its MAC are delivered to it. Duplicate address detection probes (source
// ::) match nothing and are dropped, so DAD always succeeds: addresses are unique by
// allocation.
func podLinkLocalFlows(s *flowSet, pod PodPort) {
	from := MatchAll().InPort(pod.OFPort).EthSrc(pod.MAC)
	own := host(LinkLocalAddress(pod.MAC))
	s.add(SpoofGuard, prioSpoofSource, from.WithProtocol(ProtoIPv6).IPSrc(own), Goto(NDResponder))
	solicit := from.WithProtocol(ProtoICMPv6).IPSrc(own).ICMPv6Type(ndNeighborSolicit).NDSLL(pod.MAC)
	s.add(SpoofGuard, prioSpoofND, solicit, Goto(NDResponder))
	advert := MatchProtocol(ProtoICMPv6).ICMPv6Type(ndNeighborAdvert).EthDst(pod.MAC)
	s.add(NDResponder, prioNeighborForward, advert, OutputPort{Port: pod.OFPort})
}

// toPod routes a packet to the pod: from the gateway's MAC to the pod's, out its port.
// L3DecTTL decrements the TTL unless the packet came from the gateway port.
func (b *Builder) toPod(pod PodPort) []Action {
	return []Action{
		SetEthSrc(b.node.GatewayMAC),
		SetEthDst(pod.MAC),
		LoadReg(OutPortField.Mark(pod.OFPort)),
		Goto(L3DecTTL),
	}
}

func hasIPv6(ips []netip.Addr) bool {
	for _, ip := range ips {
		if ip.Is6() {
			return true
		}
	}
	return false
}
