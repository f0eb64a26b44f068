package ipam

import "net/netip"

// BlockGateway is the gateway address of a node block: its first address after the
// network address. Every pool reserves it; the node's gateway port carries it.
func BlockGateway(block netip.Prefix) netip.Addr { return block.Masked().Addr().Next() }

// NodeGatewayMAC is the MAC of the gateway of a node with these blocks, derived from the
// gateway addresses as a pod's MAC is from its addresses (so it equals every pod's
// PodNetwork.GatewayMAC on that node).
func NodeGatewayMAC(blocks []netip.Prefix) MAC {
	gws := make([]netip.Addr, 0, len(blocks))
	for _, b := range blocks {
		gws = append(gws, BlockGateway(b))
	}
	return DeriveMAC(gws...)
}
