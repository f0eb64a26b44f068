package agent

import (
	"fmt"
	"net"
	"net/netip"

	log "github.com/sirupsen/logrus"
	corev1 "k8s.io/api/core/v1"

	"github.com/kovs-net/kovs/go-controller/pkg/controller/ipam"
	"github.com/kovs-net/kovs/go-controller/pkg/pipeline"
)

// nodeSubnets reads the blocks kovs-controller recorded on a Node.
func nodeSubnets(n *corev1.Node) ([]netip.Prefix, error) {
	value, ok := n.Annotations[ipam.NodeSubnetsAnnotationKey]
	if !ok {
		return nil, fmt.Errorf("node %s has no %s annotation yet", n.Name, ipam.NodeSubnetsAnnotationKey)
	}
	a, err := ipam.ParseNodeSubnetsAnnotation(value)
	if err != nil {
		return nil, err
	}
	return a.Blocks(), nil
}

// nodeInternalIPs returns the node's InternalIP addresses, in the order the node reports them.
func nodeInternalIPs(n *corev1.Node) []netip.Addr {
	var ips []netip.Addr
	for _, a := range n.Status.Addresses {
		if a.Type != corev1.NodeInternalIP {
			continue
		}
		if ip, err := netip.ParseAddr(a.Address); err == nil {
			ips = append(ips, ip)
		}
	}
	return ips
}

// peerAddresses are another Node's tunnel identity: the InternalIPs kovs-controller
// recorded for it (kovs.io/node-addresses), which no other Node holds. A node's own
// kubelet writes its status.addresses, so a compromised node could claim another's
// address there (issue 29); only a Node the controller has not recorded yet (a controller
// older than the record) is taken at its status's word. ok is false when the record is
// unreadable.
func peerAddresses(n *corev1.Node) ([]netip.Addr, bool) {
	value, recorded := n.Annotations[ipam.NodeAddressesAnnotationKey]
	if !recorded {
		return nodeInternalIPs(n), true
	}
	addrs, err := ipam.ParseNodeAddressesAnnotation(value)
	if err != nil {
		log.WithField("peer", n.Name).WithError(err).Warn("tunnel peer left out: unreadable address record")
		return nil, false
	}
	return addrs, true
}

// firstOfFamily is the first address of the underlay family the cluster's tunnels use
// (the family of this node's own endpoint).
func firstOfFamily(addrs []netip.Addr, family6 bool) (netip.Addr, bool) {
	for _, ip := range addrs {
		if ip.Is6() == family6 {
			return ip, true
		}
	}
	return netip.Addr{}, false
}

func gatewayMAC(blocks []netip.Prefix) net.HardwareAddr {
	mac := ipam.NodeGatewayMAC(blocks)
	return net.HardwareAddr(mac[:])
}

// tunnelPeer turns another Node into a tunnel peer; ok is false while it has no subnets or
// no recorded endpoint of the tunnel family.
func tunnelPeer(n *corev1.Node, family6 bool) (pipeline.TunnelPeer, bool) {
	blocks, err := nodeSubnets(n)
	if err != nil {
		return pipeline.TunnelPeer{}, false
	}
	addrs, ok := peerAddresses(n)
	if !ok {
		return pipeline.TunnelPeer{}, false
	}
	ip, ok := firstOfFamily(addrs, family6)
	if !ok {
		return pipeline.TunnelPeer{}, false
	}
	return pipeline.TunnelPeer{NodeName: n.Name, UnderlayIP: ip, PodSubnets: blocks, GatewayMAC: gatewayMAC(blocks),
		NodeIPs: addrs}, true
}

// reportRejectedPeers logs the peers whose rejection (pipeline.UsablePeers) is new or
// changed since before, and those that are usable again; it returns now's.
func reportRejectedPeers(before, now map[string]string) map[string]string {
	for name, why := range now {
		if before[name] != why {
			log.WithField("peer", name).WithField("reason", why).
				Warn("tunnel peer left out: its Node record is unusable for this node (no routes to it; the other flows keep syncing)")
		}
	}
	for name := range before {
		if _, still := now[name]; !still {
			log.WithField("peer", name).Info("tunnel peer usable again")
		}
	}
	return now
}
