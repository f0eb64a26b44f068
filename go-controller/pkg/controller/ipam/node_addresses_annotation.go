package ipam

import (
	"encoding/json"
	"fmt"
	"net/netip"
)

// NodeAddressesAnnotationKey is the Node annotation holding the node's tunnel identity:
// the InternalIP addresses kovs-controller recorded for it, which no other Node holds.
// Agents take a peer's tunnel endpoint and its host addresses from it, not from the
// Node's status.addresses, which the node's own kubelet writes (issue 29).
const NodeAddressesAnnotationKey = "kovs.io/node-addresses"

// nodeAddresses is the JSON of the annotation, for example
//
//	{"addresses":["172.31.0.2","fd00:172:31::2"]}
//
// in the order the node reports them.
type nodeAddresses struct {
	Addresses []netip.Addr `json:"addresses"`
}

// NodeAddressesAnnotation encodes a node's recorded addresses.
func NodeAddressesAnnotation(addrs []netip.Addr) (string, error) {
	if err := validateNodeAddresses(addrs); err != nil {
		return "", err
	}
	if addrs == nil {
		addrs = []netip.Addr{}
	}
	b, err := json.Marshal(nodeAddresses{Addresses: addrs})
	if err != nil {
		return "", fmt.Errorf("encode %s annotation: %w", NodeAddressesAnnotationKey, err)
	}
	return string(b), nil
}

// ParseNodeAddressesAnnotation decodes a node's recorded addresses; an empty list is
// valid (every address the node claims is another node's).
func ParseNodeAddressesAnnotation(value string) ([]netip.Addr, error) {
	var a nodeAddresses
	if err := json.Unmarshal([]byte(value), &a); err != nil {
		return nil, &AnnotationError{Annotation: NodeAddressesAnnotationKey, Err: err}
	}
	if err := validateNodeAddresses(a.Addresses); err != nil {
		return nil, err
	}
	return a.Addresses, nil
}

func validateNodeAddresses(addrs []netip.Addr) error {
	seen := map[netip.Addr]bool{}
	for i, a := range addrs {
		bad := func(format string, args ...any) error {
			return &AnnotationError{Annotation: NodeAddressesAnnotationKey, Field: fmt.Sprintf("addresses[%d]", i), Err: fmt.Errorf(format, args...)}
		}
		switch {
		case !a.IsValid():
			return bad("no address")
		case a.Zone() != "" || a.Is4In6():
			return bad("%s: want a plain IPv4 or IPv6 address", a)
		case a.IsUnspecified() || a.IsMulticast() || a.IsLoopback():
			return bad("%s is not a host address", a)
		case seen[a]:
			return bad("%s listed twice", a)
		}
		seen[a] = true
	}
	return nil
}
