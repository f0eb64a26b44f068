package ipam

import (
	"net/netip"
	"testing"
)

func TestNodeGatewayMatchesPoolsAndPodNetworks(t *testing.T) {
	blocks := []netip.Prefix{netip.MustParsePrefix("10.244.3.0/24"), netip.MustParsePrefix("fd00:10:244:3::/64")}
	pools, err := NewPodAddressPools(blocks, PoolOptions{})
	if err != nil {
		t.Fatal(err)
	}
	addrs, err := pools.Allocate("ns/pod/uid")
	if err != nil {
		t.Fatal(err)
	}
	for i, p := range pools.Pools() {
		if got := BlockGateway(blocks[i]); got != p.Gateway() {
			t.Errorf("BlockGateway(%s) = %s, pool gateway %s", blocks[i], got, p.Gateway())
		}
	}
	n, err := NewPodNetwork(addrs)
	if err != nil {
		t.Fatal(err)
	}
	if NodeGatewayMAC(blocks) != n.GatewayMAC() {
		t.Errorf("node gateway MAC %s, pod sees %s", NodeGatewayMAC(blocks), n.GatewayMAC())
	}
}
