package ipam

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"slices"
)

// PodNetworkAnnotationKey is the Pod annotation holding its PodNetwork.
const PodNetworkAnnotationKey = "kovs.io/pod-network"

// maxUIDLength bounds PodNetwork.UID: Kubernetes UIDs are 36-character UUIDs; the bound
// leaves room and keeps a forged record from carrying anything large.
const maxUIDLength = 128

// PodNetwork is what a pod's interface gets: its addresses (one per family,
// IPv4 first), its MAC and its routes. It is recorded on the Pod as the
// kovs.io/pod-network annotation, for example:
//
//	{"ips":[{"address":"10.244.1.5/24","gateway":"10.244.1.1"},
//	        {"address":"fd00:10:244:1::5/64","gateway":"fd00:10:244:1::1"}],
//	 "mac":"0a:58:0a:f4:01:05",
//	 "uid":"7c9e6679-7425-40de-944b-e07fc1f90ae7",
//	 "routes":[{"dest":"0.0.0.0/0","nextHop":"10.244.1.1"},{"dest":"::/0","nextHop":"fd00:10:244:1::1"}]}
type PodNetwork struct {
	// Addresses are the pod's addresses, at most one per family.
	Addresses []PodAddress
	// MAC is the MAC of the pod's interface.
	MAC MAC
	// UID is the UID of the pod the addresses were allocated to. kovs-agent plugs them
	// into that pod only, so a copy of the record on another pod gets nothing (empty in
	// records of kovs-controller before it wrote UIDs).
	UID string
	// Routes are the pod's routes, via on-link next hops.
	Routes []Route
}

// Route is a route of a pod.
type Route struct {
	Dest    netip.Prefix
	NextHop netip.Addr
}

// NewPodNetwork returns the network of a pod with the given addresses: IPv4
// first, the MAC derived from its IPs, and a default route per family via the
// gateway (which also covers the cluster CIDRs, so no route for them is added).
// The same addresses always encode to the same annotation.
func NewPodNetwork(addrs []PodAddress) (PodNetwork, error) {
	n := PodNetwork{Addresses: slices.Clone(addrs)}
	slices.SortStableFunc(n.Addresses, func(a, b PodAddress) int { return int(a.Family()) - int(b.Family()) })
	ips := make([]netip.Addr, 0, len(n.Addresses))
	for _, a := range n.Addresses {
		ips = append(ips, a.Address.Addr())
		n.Routes = append(n.Routes, Route{Dest: defaultRoute(a.Family()), NextHop: a.Gateway})
	}
	n.MAC = DeriveMAC(ips...)
	if err := n.Validate(); err != nil {
		return PodNetwork{}, err
	}
	return n, nil
}

func defaultRoute(f Family) netip.Prefix {
	if f == IPv4 {
		return netip.PrefixFrom(netip.IPv4Unspecified(), 0)
	}
	return netip.PrefixFrom(netip.IPv6Unspecified(), 0)
}

// Address returns the pod's address of family f, if it has one.
func (n PodNetwork) Address(f Family) (PodAddress, bool) {
	for _, a := range n.Addresses {
		if a.Family() == f {
			return a, true
		}
	}
	return PodAddress{}, false
}

// IPs returns the pod's addresses without their prefix lengths, in record order.
func (n PodNetwork) IPs() []netip.Addr {
	ips := make([]netip.Addr, 0, len(n.Addresses))
	for _, a := range n.Addresses {
		ips = append(ips, a.Address.Addr())
	}
	return ips
}

// GatewayMAC returns the MAC of the pod's gateway, derived from the gateway IPs
// as the pod's MAC is from the pod's IPs.
func (n PodNetwork) GatewayMAC() MAC {
	gws := make([]netip.Addr, 0, len(n.Addresses))
	for _, a := range n.Addresses {
		gws = append(gws, a.Gateway)
	}
	return DeriveMAC(gws...)
}

// Validate checks the network; the *AnnotationError it returns names the bad field.
func (n PodNetwork) Validate() error {
	bad := func(field string, format string, args ...any) error {
		return &AnnotationError{Annotation: PodNetworkAnnotationKey, Field: field, Err: fmt.Errorf(format, args...)}
	}
	if len(n.Addresses) == 0 {
		return bad("ips", "no address")
	}
	seen := map[Family]bool{}
	for i, a := range n.Addresses {
		field := fmt.Sprintf("ips[%d]", i)
		switch ip := a.Address.Addr(); {
		case !a.Address.IsValid():
			return bad(field+".address", "not set")
		case ip.Is4In6() || ip.Zone() != "":
			return bad(field+".address", "%s is not a plain IPv4 or IPv6 address", a.Address)
		case seen[a.Family()]:
			return bad(field+".address", "second %s address %s: a pod has one address per family", a.Family(), a.Address)
		case !a.Gateway.IsValid():
			return bad(field+".gateway", "not set")
		case !a.Address.Contains(a.Gateway) || a.Gateway == ip:
			return bad(field+".gateway", "%s is not another address of %s", a.Gateway, a.Address.Masked())
		}
		seen[a.Family()] = true
	}
	if !n.MAC.IsUnicast() {
		return bad("mac", "%s is not a unicast MAC", n.MAC)
	}
	if len(n.UID) > maxUIDLength {
		return bad("uid", "%d characters, more than a pod UID's %d", len(n.UID), maxUIDLength)
	}
	for i, r := range n.Routes {
		field := fmt.Sprintf("routes[%d]", i)
		switch {
		case !r.Dest.IsValid() || r.Dest != r.Dest.Masked():
			return bad(field+".dest", "%s is not a network prefix", r.Dest)
		case !r.NextHop.IsValid() || FamilyOf(r.NextHop) != FamilyOf(r.Dest.Addr()):
			return bad(field+".nextHop", "%s is not an %s address", r.NextHop, FamilyOf(r.Dest.Addr()))
		case !n.onLink(r.NextHop):
			return bad(field+".nextHop", "%s is not on the pod's subnets", r.NextHop)
		}
	}
	return nil
}

func (n PodNetwork) onLink(ip netip.Addr) bool {
	for _, a := range n.Addresses {
		if a.Address.Contains(ip) {
			return true
		}
	}
	return false
}

// The annotation's JSON form. Fields are strings so that parse errors can name
// the field; their order is the encoding order.
type (
	podNetworkJSON struct {
		IPs    []podAddressJSON `json:"ips"`
		MAC    string           `json:"mac"`
		UID    string           `json:"uid,omitempty"`
		Routes []routeJSON      `json:"routes,omitempty"`
	}
	podAddressJSON struct {
		Address string `json:"address"`
		Gateway string `json:"gateway"`
	}
	routeJSON struct {
		Dest    string `json:"dest"`
		NextHop string `json:"nextHop"`
	}
)

// MarshalJSON encodes the annotation form.
func (n PodNetwork) MarshalJSON() ([]byte, error) {
	w := podNetworkJSON{IPs: []podAddressJSON{}, MAC: n.MAC.String(), UID: n.UID}
	for _, a := range n.Addresses {
		w.IPs = append(w.IPs, podAddressJSON{Address: a.Address.String(), Gateway: a.Gateway.String()})
	}
	for _, r := range n.Routes {
		w.Routes = append(w.Routes, routeJSON{Dest: r.Dest.String(), NextHop: r.NextHop.String()})
	}
	return json.Marshal(w)
}

// UnmarshalJSON decodes and validates the annotation form; errors are
// *AnnotationError naming the bad field. Unknown fields are ignored, so that
// an older reader accepts what a newer controller writes.
func (n *PodNetwork) UnmarshalJSON(b []byte) error {
	var w podNetworkJSON
	if err := json.Unmarshal(b, &w); err != nil {
		return &AnnotationError{Annotation: PodNetworkAnnotationKey, Err: err}
	}
	bad := func(field string, err error) error {
		return &AnnotationError{Annotation: PodNetworkAnnotationKey, Field: field, Err: err}
	}
	var v PodNetwork
	for i, a := range w.IPs {
		addr, err := netip.ParsePrefix(a.Address)
		if err != nil {
			return bad(fmt.Sprintf("ips[%d].address", i), err)
		}
		gw, err := netip.ParseAddr(a.Gateway)
		if err != nil {
			return bad(fmt.Sprintf("ips[%d].gateway", i), err)
		}
		v.Addresses = append(v.Addresses, PodAddress{Address: addr, Gateway: gw})
	}
	mac, err := ParseMAC(w.MAC)
	if err != nil {
		return bad("mac", err)
	}
	v.MAC = mac
	v.UID = w.UID
	for i, r := range w.Routes {
		dest, err := netip.ParsePrefix(r.Dest)
		if err != nil {
			return bad(fmt.Sprintf("routes[%d].dest", i), err)
		}
		hop, err := netip.ParseAddr(r.NextHop)
		if err != nil {
			return bad(fmt.Sprintf("routes[%d].nextHop", i), err)
		}
		v.Routes = append(v.Routes, Route{Dest: dest, NextHop: hop})
	}
	if err := v.Validate(); err != nil {
		return err
	}
	*n = v
	return nil
}

// Annotation returns the value of the kovs.io/pod-network annotation.
func (n PodNetwork) Annotation() (string, error) {
	if err := n.Validate(); err != nil {
		return "", err
	}
	b, err := json.Marshal(n)
	if err != nil {
		return "", fmt.Errorf("encode %s annotation: %w", PodNetworkAnnotationKey, err)
	}
	return string(b), nil
}

// ParsePodNetwork parses the value of the kovs.io/pod-network annotation.
func ParsePodNetwork(value string) (PodNetwork, error) {
	var n PodNetwork
	if err := n.UnmarshalJSON([]byte(value)); err != nil {
		return PodNetwork{}, err
	}
	return n, nil
}
