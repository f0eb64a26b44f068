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

// tunnelEndpoint is the node's first InternalIP of the underlay family the cluster's
// tunnels use (the family of this node's own endpoint).
func tunnelEndpoint(n *corev1.Node, family6 bool) (netip.Addr, bool) {
	for _, ip := range nodeInternalIPs(n) {
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
// no endpoint of the tunnel family.
func tunnelPeer(n *corev1.Node, family6 bool) (pipeline.TunnelPeer, bool) {
	blocks, err := nodeSubnets(n)
	if err != nil {
		return pipeline.TunnelPeer{}, false
	}
	ip, ok := tunnelEndpoint(n, family6)
	if !ok {
		return pipeline.TunnelPeer{}, false
	}
	return pipeline.TunnelPeer{NodeName: n.Name, UnderlayIP: ip, PodSubnets: blocks, GatewayMAC: gatewayMAC(blocks),
		NodeIPs: nodeInternalIPs(n)}, true
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
