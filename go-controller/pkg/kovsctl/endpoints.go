package kovsctl

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kovs-net/kovs/go-controller/pkg/controller/ipam"
)

// endpoint is one end of a traced packet.
type endpoint struct {
	Name string // ns/name of a pod, a node name, or an address
	Node string // the node it lives on, if known
	IPs  []netip.Addr
	MAC  net.HardwareAddr // pods only
	Pod  *corev1.Pod
}

// srcPod resolves the source: a pod with kovs addresses.
func (a Access) srcPod(ctx context.Context, key string) (*endpoint, error) {
	ep, err := a.pod(ctx, key)
	if err != nil {
		return nil, err
	}
	if ep.Pod.Spec.HostNetwork {
		return nil, fmt.Errorf("source %s is a hostNetwork pod: its packets do not enter br-int from a pod port", key)
	}
	if ep.MAC == nil {
		return nil, fmt.Errorf("source %s has no addresses yet (its status.podIPs is empty: is its sandbox running?)", key)
	}
	return ep, nil
}

// dst resolves a destination: ns/name of a pod, a node name, or an IP address.
func (a Access) dst(ctx context.Context, s string) (*endpoint, error) {
	if strings.Contains(s, "/") {
		return a.pod(ctx, s)
	}
	if ip, err := netip.ParseAddr(s); err == nil {
		return &endpoint{Name: ip.String(), IPs: []netip.Addr{ip}}, nil
	}
	node, err := a.Client.CoreV1().Nodes().Get(ctx, s, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("destination %q is neither a pod (ns/name), an IP nor a node: %w", s, err)
	}
	return &endpoint{Name: "node " + node.Name, Node: node.Name, IPs: internalIPs(node)}, nil
}

func (a Access) pod(ctx context.Context, key string) (*endpoint, error) {
	ns, name, ok := strings.Cut(key, "/")
	if !ok {
		return nil, fmt.Errorf("pod %q: write it as NAMESPACE/NAME", key)
	}
	pod, err := a.Client.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("pod %s: %w", key, err)
	}
	ep := &endpoint{Name: key, Node: pod.Spec.NodeName, Pod: pod}
	for _, ip := range pod.Status.PodIPs {
		if addr, err := netip.ParseAddr(ip.IP); err == nil {
			ep.IPs = append(ep.IPs, addr.Unmap())
		}
	}
	if len(ep.IPs) > 0 && !pod.Spec.HostNetwork {
		// The agent derives a pod's MAC from its addresses (ipam.DeriveMAC).
		mac := ipam.DeriveMAC(ep.IPs...)
		ep.MAC = net.HardwareAddr(mac[:])
	}
	return ep, nil
}

func internalIPs(n *corev1.Node) []netip.Addr {
	var ips []netip.Addr
	for _, a := range n.Status.Addresses {
		if ip, err := netip.ParseAddr(a.Address); err == nil && a.Type == corev1.NodeInternalIP {
			ips = append(ips, ip)
		}
	}
	return ips
}

// nodeInfo is what a trace needs of a node: its gateway MAC and underlay addresses.
type nodeInfo struct {
	Name       string
	GatewayMAC net.HardwareAddr
	Underlay   []netip.Addr
}

func (a Access) nodes(ctx context.Context) (map[string]nodeInfo, error) {
	list, err := a.Client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	out := map[string]nodeInfo{}
	for _, n := range list.Items {
		info := nodeInfo{Name: n.Name, Underlay: internalIPs(&n)}
		if ann, err := ipam.ParseNodeSubnetsAnnotation(n.Annotations[ipam.NodeSubnetsAnnotationKey]); err == nil {
			mac := ipam.NodeGatewayMAC(ann.Blocks())
			info.GatewayMAC = net.HardwareAddr(mac[:])
		}
		out[n.Name] = info
	}
	return out, nil
}

// nodeByUnderlay finds the node that owns an underlay address.
func nodeByUnderlay(nodes map[string]nodeInfo, ip string) (nodeInfo, bool) {
	addr, err := netip.ParseAddr(ip)
	if err != nil {
		return nodeInfo{}, false
	}
	for _, n := range nodes {
		for _, u := range n.Underlay {
			if u == addr {
				return n, true
			}
		}
	}
	return nodeInfo{}, false
}

func sameFamily(ips []netip.Addr, like netip.Addr) (netip.Addr, bool) {
	for _, ip := range ips {
		if ip.Is4() == like.Is4() {
			return ip, true
		}
	}
	return netip.Addr{}, false
}
