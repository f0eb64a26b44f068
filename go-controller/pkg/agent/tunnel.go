package agent

import (
	"context"
	"net"
	"net/netip"
	"strconv"
	"time"

	log "github.com/sirupsen/logrus"
	"github.com/vishvananda/netlink"
)

// neighborPeriod is how often the tunnel neighbours are seeded again: a restarted
// ovs-vswitchd forgets them.
//
// On the userspace datapath vswitchd resolves outer next hops itself and drops the first
// packet to a peer it has not resolved; the agent makes the kernel resolve each peer and
// seeds vswitchd with the answer (tnl/neigh/set): before the node takes pods, when peers
// change, and again every period (the agent's neighbors runner).
const neighborPeriod = 15 * time.Second

// seedTunnelNeighbors seeds every current peer once (userspace datapath only).
func (a *Agent) seedTunnelNeighbors(ctx context.Context) {
	if !a.netdev || a.cfg.UplinkBridge == "" {
		return
	}
	for _, p := range a.state.Peers() {
		a.seedNeighbor(ctx, p.UnderlayIP)
	}
}

func (a *Agent) seedNeighbor(ctx context.Context, ip netip.Addr) {
	mac, err := resolveNeighbor(ip)
	entry := log.WithField("peer", ip)
	if err != nil {
		entry.WithError(err).Debug("tunnel neighbour not resolved yet")
		return
	}
	if err := a.of.Vswitchd().TunnelNeighborSet(ctx, a.cfg.UplinkBridge, ip, mac); err != nil {
		entry.WithError(err).Warn("seed tunnel neighbour")
	}
}

// resolveNeighbor returns the kernel's neighbour entry for ip, prompting a resolution (a
// datagram to the discard port) when there is none yet.
func resolveNeighbor(ip netip.Addr) (net.HardwareAddr, error) {
	if mac := kernelNeighbor(ip); mac != nil {
		return mac, nil
	}
	if c, err := net.Dial("udp", net.JoinHostPort(ip.String(), strconv.Itoa(9))); err == nil {
		_, _ = c.Write([]byte{0})
		c.Close()
	}
	for i := 0; i < 20; i++ {
		time.Sleep(50 * time.Millisecond)
		if mac := kernelNeighbor(ip); mac != nil {
			return mac, nil
		}
	}
	return nil, &net.AddrError{Err: "no neighbour entry", Addr: ip.String()}
}

func kernelNeighbor(ip netip.Addr) net.HardwareAddr {
	family := netlink.FAMILY_V4
	if ip.Is6() {
		family = netlink.FAMILY_V6
	}
	neighs, err := netlink.NeighList(0, family)
	if err != nil {
		return nil
	}
	for _, n := range neighs {
		if n.HardwareAddr != nil && n.IP.Equal(ip.AsSlice()) && n.State&(netlink.NUD_REACHABLE|netlink.NUD_STALE|netlink.NUD_PERMANENT|netlink.NUD_DELAY|netlink.NUD_PROBE) != 0 {
			return n.HardwareAddr
		}
	}
	return nil
}
