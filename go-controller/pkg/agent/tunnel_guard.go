package agent

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"sync"
	"time"

	log "github.com/sirupsen/logrus"

	"github.com/kovs-net/kovs/go-controller/pkg/runner"
)

// Forged Geneve from the node's own stack (issue 29). Any process on a node, a
// hostNetwork pod's included and without any privilege, can send a UDP datagram to a
// peer's Geneve port; the peer takes it as a tunnel packet of this node, whose inner
// source may be any of this node's pods. On the userspace (netdev) datapath ovs-vswitchd
// builds its tunnel packets itself and sends them out through br-ex's uplink port: they
// never pass the host's netfilter hooks. So the nftables table inet kovs-tunnel drops, on
// the host's output hook, every datagram to the Geneve port of any node's address:
//
//	ip daddr @nodes4 udp dport 6081 counter drop      and the same for ip6
//
// and only OVS's own tunnel traffic reaches the peers' Geneve port. On the kernel
// (system) datapath the Geneve vport sends through the host's output hook too, so the
// table is not written there. What it cannot close: a process that writes whole frames
// (a packet socket, which needs CAP_NET_RAW, or root) bypasses netfilter, and anyone on
// the underlay can send from the node's address; only an encrypted, authenticated tunnel
// would close those (docs/security.md). The table is rewritten when the nodes' addresses
// change and every tunnelGuardResync.
const (
	tunnelGuardNFTable = "kovs-tunnel"
	// genevePort is the peers' Geneve UDP port: OVS's default, which the tunnel port
	// keeps (no dst_port option).
	genevePort        = 6081
	tunnelGuardResync = 30 * time.Second
)

// tunnelGuard keeps the node's kovs-tunnel table.
type tunnelGuard struct {
	nodes  func() []netip.Addr
	tables *hostTables

	mu   sync.Mutex
	last string
}

// startTunnelGuard keeps the table until ctx ends, on the userspace datapath; the
// returned function asks for a rewrite (the nodes' addresses changed). On the kernel
// datapath it removes a table an earlier configuration left and returns nil.
func (a *Agent) startTunnelGuard(ctx context.Context) func() {
	g := &tunnelGuard{nodes: a.allNodeAddresses, tables: a.tables}
	if !a.netdev {
		if err := a.tables.write(deleteTableScript(tunnelGuardNFTable)); err != nil && !errors.Is(err, errHostTablesRemoved) {
			log.WithError(err).WithField("table", tunnelGuardNFTable).Warn("remove the tunnel guard")
		}
		log.WithField("table", tunnelGuardNFTable).Info("kernel datapath: host processes are not kept from the peers' Geneve port (OVS's own tunnel packets pass the host's output hook)")
		return nil
	}
	r := runner.MustNewBoundedFrequencyRunner("tunnel-guard", g.sync,
		runner.Bounds{MinInterval: 100 * time.Millisecond, MaxInterval: tunnelGuardResync, Burst: 2})
	g.sync()
	go r.Loop(ctx)
	return r.Run
}

// sync writes the table (every time: someone may have flushed it).
func (g *tunnelGuard) sync() {
	script := tunnelGuardScript(g.nodes())
	g.mu.Lock()
	defer g.mu.Unlock()
	if err := g.tables.write(script); err != nil {
		if !errors.Is(err, errHostTablesRemoved) {
			log.WithError(err).WithField("table", tunnelGuardNFTable).Warn("tunnel guard rules")
		}
		return
	}
	if script != g.last {
		log.WithField("table", tunnelGuardNFTable).WithField("nodes", len(g.nodes())).Info("tunnel guard rules written")
	}
	g.last = script
}

// tunnelGuardScript is the whole table, replaced atomically: the host's datagrams to the
// Geneve port of any of nodeAddrs are counted and dropped.
func tunnelGuardScript(nodeAddrs []netip.Addr) string {
	var b strings.Builder
	b.WriteString(deleteTableScript(tunnelGuardNFTable))
	fmt.Fprintf(&b, "table inet %s {\n", tunnelGuardNFTable)
	var rules []string
	for _, v6 := range []bool{false, true} {
		fam, typ, suffix := "ip", "ipv4_addr", "4"
		if v6 {
			fam, typ, suffix = "ip6", "ipv6_addr", "6"
		}
		var nodes []netip.Prefix
		for _, a := range nodeAddrs {
			if a.Is6() == v6 {
				nodes = append(nodes, netip.PrefixFrom(a, a.BitLen()))
			}
		}
		set(&b, "nodes"+suffix, typ, nodes)
		rules = append(rules, fmt.Sprintf("%s daddr @nodes%s udp dport %d counter drop", fam, suffix, genevePort))
	}
	chain(&b, "output", "type filter hook output priority 0", rules)
	b.WriteString("}\n")
	return b.String()
}
