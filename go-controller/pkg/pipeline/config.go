package pipeline

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
)

// NodeConfig is what the pipeline needs to know about the node it runs on.
//
// The gateway is the node's OVS internal port (a tap in the node's namespace). It carries
// GatewayIPs and GatewayMAC, and it is the pods' default gateway: pods ARP / solicit for
// GatewayIPs and OVS answers them itself, towards pods only.
type NodeConfig struct {
	Name          string
	GatewayMAC    net.HardwareAddr
	GatewayIPs    []netip.Addr   // one per pod subnet, inside it
	PodSubnets    []netip.Prefix // this node's pod blocks, at most one per family
	ClusterCIDRs  []netip.Prefix // all pod addresses of the cluster, per family
	TunnelOFPort  uint32         // the flow-based Geneve port (remote_ip=flow, key=flow)
	GatewayOFPort uint32         // the gateway internal port
	UnderlayIPs   []netip.Addr   // the node's own addresses, tunnel endpoints included
}

// PodPort is a local pod's OVS port and the addresses allocated to it.
type PodPort struct {
	Namespace string
	Name      string
	// UID tells the pod from an earlier one of the same name: NetworkPolicy flows apply
	// a share's rules to the port only when the UIDs agree (or either is empty).
	UID    string
	OFPort uint32
	MAC    net.HardwareAddr
	IPs    []netip.Addr // at most one per family, inside the node's pod subnets
	// EgressMeter and IngressMeter are the OpenFlow meters that limit what the pod sends
	// and receives (its kubernetes.io/egress-bandwidth and ingress-bandwidth), 0 for
	// none. A meter must exist before the flows that use it.
	EgressMeter  uint32
	IngressMeter uint32
}

func (p PodPort) String() string { return p.Namespace + "/" + p.Name }

// TunnelPeer is another node of the cluster, reached through the Geneve tunnel.
type TunnelPeer struct {
	NodeName   string
	UnderlayIP netip.Addr       // its tunnel endpoint, IPv4 or IPv6
	PodSubnets []netip.Prefix   // its pod blocks
	GatewayMAC net.HardwareAddr // its gateway's MAC: the inner destination MAC
	// NodeIPs are its node addresses (InternalIPs), which its host network sends from;
	// with its pod subnets and UnderlayIP, the only inner sources its tunnel packets may
	// have.
	NodeIPs []netip.Addr
}

// Validate checks the node's configuration for what the flows rely on.
func (n NodeConfig) Validate() error {
	if n.Name == "" {
		return errors.New("node name is empty")
	}
	if err := validateMAC(n.GatewayMAC); err != nil {
		return fmt.Errorf("gateway MAC: %w", err)
	}
	if err := validateCIDRs(n.ClusterCIDRs); err != nil {
		return fmt.Errorf("cluster CIDRs: %w", err)
	}
	if err := validateBlocks(n.PodSubnets, n.ClusterCIDRs); err != nil {
		return fmt.Errorf("pod subnets: %w", err)
	}
	if err := n.validateGatewayIPs(); err != nil {
		return fmt.Errorf("gateway IPs: %w", err)
	}
	if err := n.validatePorts(); err != nil {
		return err
	}
	return n.validateUnderlay()
}

func (n NodeConfig) validateGatewayIPs() error {
	if len(n.GatewayIPs) != len(n.PodSubnets) {
		return fmt.Errorf("want one per pod subnet (%d), got %d", len(n.PodSubnets), len(n.GatewayIPs))
	}
	for _, ip := range n.GatewayIPs {
		if _, ok := n.podSubnet(ip); !ok {
			return fmt.Errorf("%s is outside the node's pod subnets", ip)
		}
	}
	return nil
}

func (n NodeConfig) validatePorts() error {
	if err := validateOFPort(n.TunnelOFPort); err != nil {
		return fmt.Errorf("tunnel ofport: %w", err)
	}
	if err := validateOFPort(n.GatewayOFPort); err != nil {
		return fmt.Errorf("gateway ofport: %w", err)
	}
	if n.TunnelOFPort == n.GatewayOFPort {
		return fmt.Errorf("tunnel and gateway share ofport %d", n.TunnelOFPort)
	}
	return nil
}

func (n NodeConfig) validateUnderlay() error {
	if len(n.UnderlayIPs) == 0 {
		return errors.New("underlay IPs: none")
	}
	for _, ip := range n.UnderlayIPs {
		if !ip.IsValid() || ip.Zone() != "" {
			return fmt.Errorf("underlay IP %q is not a plain address", ip)
		}
		if c, ok := containing(n.ClusterCIDRs, ip); ok {
			return fmt.Errorf("underlay IP %s is inside cluster CIDR %s", ip, c)
		}
	}
	return nil
}

// validate checks a pod against the node it is to run on.
func (p PodPort) validate(n NodeConfig) error {
	if err := validateOFPort(p.OFPort); err != nil {
		return fmt.Errorf("ofport: %w", err)
	}
	if p.OFPort == n.TunnelOFPort || p.OFPort == n.GatewayOFPort {
		return fmt.Errorf("ofport %d belongs to the tunnel or the gateway", p.OFPort)
	}
	if err := validateMAC(p.MAC); err != nil {
		return fmt.Errorf("MAC: %w", err)
	}
	if err := onePerFamily(len(p.IPs), func(i int) netip.Addr { return p.IPs[i] }); err != nil {
		return fmt.Errorf("IPs: %w", err)
	}
	for _, ip := range p.IPs {
		if _, ok := n.podSubnet(ip); !ok {
			return fmt.Errorf("IP %s is outside the node's pod subnets", ip)
		}
		if slices.Contains(n.GatewayIPs, ip) {
			return fmt.Errorf("IP %s is the gateway's", ip)
		}
	}
	return nil
}

// Validate checks a peer against the local node: what its flows rely on. The agent
// leaves a peer that fails it out (and says so), so one bad record cannot stop the
// node's other flows.
func (t TunnelPeer) Validate(n NodeConfig) error {
	if t.NodeName == "" || t.NodeName == n.Name {
		return fmt.Errorf("node name %q is empty or the local node's", t.NodeName)
	}
	if !t.UnderlayIP.IsValid() || t.UnderlayIP.Zone() != "" {
		return fmt.Errorf("underlay IP %q is not a plain address", t.UnderlayIP)
	}
	if err := validateMAC(t.GatewayMAC); err != nil {
		return fmt.Errorf("gateway MAC: %w", err)
	}
	if err := validateBlocks(t.PodSubnets, n.ClusterCIDRs); err != nil {
		return fmt.Errorf("pod subnets: %w", err)
	}
	for _, ip := range t.NodeIPs {
		if !ip.IsValid() || ip.Zone() != "" {
			return fmt.Errorf("node IP %q is not a plain address", ip)
		}
		if c, ok := containing(n.ClusterCIDRs, ip); ok {
			return fmt.Errorf("node IP %s is inside cluster CIDR %s", ip, c)
		}
	}
	for _, s := range t.PodSubnets {
		if !n.hasFamily(s.Addr().Is6()) {
			return fmt.Errorf("pod subnet %s: the local node has no pod subnet of its family", s)
		}
		for _, local := range n.PodSubnets {
			if s.Overlaps(local) {
				return fmt.Errorf("pod subnet %s overlaps the local node's %s", s, local)
			}
		}
	}
	return nil
}

// podSubnet is the node's pod subnet holding ip.
func (n NodeConfig) podSubnet(ip netip.Addr) (netip.Prefix, bool) {
	return containing(n.PodSubnets, ip)
}

// hasFamily reports whether the node has a pod subnet of ip's family.
func (n NodeConfig) hasFamily(ipv6 bool) bool {
	return slices.ContainsFunc(n.PodSubnets, func(p netip.Prefix) bool { return p.Addr().Is6() == ipv6 })
}

func (n NodeConfig) clone() NodeConfig {
	n.GatewayMAC = slices.Clone(n.GatewayMAC)
	n.GatewayIPs = slices.Clone(n.GatewayIPs)
	n.PodSubnets = slices.Clone(n.PodSubnets)
	n.ClusterCIDRs = slices.Clone(n.ClusterCIDRs)
	n.UnderlayIPs = slices.Clone(n.UnderlayIPs)
	return n
}

func containing(prefixes []netip.Prefix, ip netip.Addr) (netip.Prefix, bool) {
	for _, p := range prefixes {
		if p.Contains(ip) {
			return p, true
		}
	}
	return netip.Prefix{}, false
}

func validateMAC(mac net.HardwareAddr) error {
	if len(mac) != 6 {
		return fmt.Errorf("%q is not a 48-bit MAC", mac)
	}
	if mac[0]&1 != 0 {
		return fmt.Errorf("%s is a multicast MAC", mac)
	}
	return nil
}

// validateOFPort rejects 0 and the reserved ports (OFPP_MAX and above).
func validateOFPort(port uint32) error {
	if port == 0 || port >= 0xffffff00 {
		return fmt.Errorf("%d is not a usable ofport", port)
	}
	return nil
}

func validateCIDRs(cidrs []netip.Prefix) error {
	if len(cidrs) == 0 {
		return errors.New("none")
	}
	for _, c := range cidrs {
		if !c.IsValid() || c != c.Masked() {
			return fmt.Errorf("%q is not a network prefix", c)
		}
	}
	return nil
}

// validateBlocks checks node pod blocks: one or two, one per family, each a network
// prefix inside a cluster CIDR.
func validateBlocks(blocks, cluster []netip.Prefix) error {
	if err := validateCIDRs(blocks); err != nil {
		return err
	}
	if err := onePerFamily(len(blocks), func(i int) netip.Addr { return blocks[i].Addr() }); err != nil {
		return err
	}
	for _, b := range blocks {
		if !slices.ContainsFunc(cluster, func(c netip.Prefix) bool { return c.Bits() <= b.Bits() && c.Contains(b.Addr()) }) {
			return fmt.Errorf("%s is outside the cluster CIDRs", b)
		}
	}
	return nil
}

func onePerFamily(n int, addr func(int) netip.Addr) error {
	var v4, v6 int
	for i := range n {
		a := addr(i)
		switch {
		case !a.IsValid() || a.Zone() != "" || a.Is4In6():
			return fmt.Errorf("%q is not a plain address", a)
		case a.Is4():
			v4++
		default:
			v6++
		}
	}
	if n == 0 || v4 > 1 || v6 > 1 {
		return fmt.Errorf("want one per family, got %d IPv4 and %d IPv6", v4, v6)
	}
	return nil
}
