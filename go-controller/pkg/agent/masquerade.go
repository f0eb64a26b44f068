package agent

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"time"

	log "github.com/sirupsen/logrus"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/kovs-net/kovs/go-controller/pkg/runner"
)

// Traffic leaving the cluster. A pod's packet to an address outside the cluster CIDRs and
// the nodes' addresses leaves br-int through the gateway port (L3Forwarding, priority
// 50) and the node's own stack routes it out; nothing outside can route the pod's address
// back, so the node masquerades it to the address of the interface it leaves by, in the
// nftables table inet kovs-masquerade (postrouting):
//
//	oifname "kovs-gw0" return                         what goes back into br-int stays as it is
//	ip saddr @pods4 ip daddr != @keep4 masquerade     and the same for ip6
//
// pods4 are the cluster CIDRs; keep4 are the destinations never translated: the cluster
// CIDRs (pod to pod), every node's addresses (pod to node: the model's guarantees) and the
// operator's --no-masquerade-cidrs (routed networks). Replies come back through the
// kernel's connection state, un-NATed to the pod, and are routed into br-int over the
// gateway port, where OVS's conntrack knows them as replies. NetworkPolicy runs in br-int
// before any of this, so ipBlock rules judge the pod's own address. The table is
// rewritten atomically when the nodes' addresses change and every masqueradeResync.
const (
	masqueradeNFTable = "kovs-masquerade"
	masqueradeResync  = 30 * time.Second
)

// masquerader keeps the node's kovs-masquerade table.
type masquerader struct {
	gateway  string
	off      bool
	pods     []netip.Prefix // the cluster CIDRs
	routed   []netip.Prefix // --no-masquerade-cidrs
	families map[bool]bool  // ipv6 -> the node has pods of the family
	nodes    func() []netip.Addr
	tables   *hostTables

	mu   sync.Mutex
	last string
}

// startMasquerade keeps the table until ctx ends; the returned function asks for a
// rewrite (the nodes' addresses changed).
func (a *Agent) startMasquerade(ctx context.Context, families map[bool]bool) func() {
	m := &masquerader{gateway: a.cfg.GatewayName, off: a.cfg.NoMasquerade, pods: a.cfg.ClusterCIDRs,
		routed: a.cfg.NoMasqueradeCIDRs, families: families, nodes: a.allNodeAddresses, tables: a.tables}
	r := runner.MustNewBoundedFrequencyRunner("masquerade", m.sync,
		runner.Bounds{MinInterval: 100 * time.Millisecond, MaxInterval: masqueradeResync, Burst: 2})
	m.sync()
	go r.Loop(ctx)
	return r.Run
}

// allNodeAddresses are the addresses every Node reports (InternalIP and ExternalIP).
func (a *Agent) allNodeAddresses() []netip.Addr {
	nodes, err := a.nodes.List(labels.Everything())
	if err != nil {
		return nil
	}
	var out []netip.Addr
	for _, n := range nodes {
		for _, addr := range n.Status.Addresses {
			if addr.Type != corev1.NodeInternalIP && addr.Type != corev1.NodeExternalIP {
				continue
			}
			if ip, err := netip.ParseAddr(addr.Address); err == nil && !slices.Contains(out, ip) {
				out = append(out, ip)
			}
		}
	}
	slices.SortFunc(out, netip.Addr.Compare)
	return out
}

// sync writes the table if it changed since the last successful write (and every
// masqueradeResync, when the runner calls it unasked, in case someone flushed it).
func (m *masquerader) sync() {
	script := m.script(m.nodes())
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.tables.write(script); err != nil {
		if !errors.Is(err, errHostTablesRemoved) {
			log.WithError(err).WithField("table", masqueradeNFTable).Warn("masquerade rules")
		}
		return
	}
	if script != m.last {
		log.WithField("table", masqueradeNFTable).WithField("off", m.off).WithField("no-masquerade", m.routed).
			Info("masquerade rules written")
	}
	m.last = script
}

// script is the whole table, replaced atomically; with masquerading off, only the removal
// of a table an earlier configuration left.
func (m *masquerader) script(nodeAddrs []netip.Addr) string {
	var b strings.Builder
	b.WriteString(deleteTableScript(masqueradeNFTable))
	if m.off {
		return b.String()
	}
	fmt.Fprintf(&b, "table inet %s {\n", masqueradeNFTable)
	var rules []string
	for _, v6 := range []bool{false, true} {
		if !m.families[v6] {
			continue
		}
		fam, typ, suffix := "ip", "ipv4_addr", "4"
		if v6 {
			fam, typ, suffix = "ip6", "ipv6_addr", "6"
		}
		pods := ofFamily(m.pods, v6)
		keep := append(slices.Clone(pods), ofFamily(m.routed, v6)...)
		for _, a := range nodeAddrs {
			if a.Is6() == v6 {
				keep = append(keep, netip.PrefixFrom(a, a.BitLen()))
			}
		}
		set(&b, "pods"+suffix, typ, pods)
		set(&b, "keep"+suffix, typ, keep)
		rules = append(rules, fmt.Sprintf("%s saddr @pods%s %s daddr != @keep%s masquerade", fam, suffix, fam, suffix))
	}
	chain(&b, "postrouting", "type nat hook postrouting priority 100", append([]string{`oifname "` + m.gateway + `" return`}, rules...))
	b.WriteString("}\n")
	return b.String()
}

// set writes an interval set (auto-merge: the prefixes may overlap).
func set(b *strings.Builder, name, typ string, prefixes []netip.Prefix) {
	fmt.Fprintf(b, "  set %s {\n    type %s; flags interval; auto-merge;\n", name, typ)
	if len(prefixes) > 0 {
		elems := make([]string, len(prefixes))
		for i, p := range prefixes {
			elems[i] = p.Masked().String()
		}
		fmt.Fprintf(b, "    elements = { %s }\n", strings.Join(elems, ", "))
	}
	b.WriteString("  }\n")
}

func ofFamily(prefixes []netip.Prefix, v6 bool) []netip.Prefix {
	var out []netip.Prefix
	for _, p := range prefixes {
		if p.Addr().Is6() == v6 {
			out = append(out, p)
		}
	}
	return out
}
