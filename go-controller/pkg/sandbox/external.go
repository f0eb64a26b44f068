package sandbox

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"os/exec"
	"slices"
	"strconv"
	"strings"

	"github.com/kovs-net/kovs/go-controller/pkg/sandbox/responder"
)

// The external host: a network namespace on the underlay that is neither a node nor a
// pod, as a server on the operator's network (a database, a package mirror) is. It has
// addresses on the nodes' underlay subnets and no route to any pod CIDR, so a pod's
// packet that reaches it untranslated cannot be answered. It serves TCP and UDP (and SCTP
// INITs) on ExternalPorts with the responder's line, which names the source it saw; its
// kernel answers ICMP echo. A witness (an nftables set filled from the prerouting hook,
// before conntrack or routing) records the source and protocol of every packet sent to
// its addresses, including those it cannot answer: ExternalSeen reads it.
var (
	// ExternalV4 and ExternalV6 are the external host's ordinary addresses.
	ExternalV4 = netip.MustParseAddr("172.30.0.250")
	ExternalV6 = netip.MustParseAddr("fd00:172:30::fa")
	// ExternalRoutedV4 and ExternalRoutedV6 are its second addresses, for a network the
	// operator routes pod addresses to (tests list them in --no-masquerade-cidrs).
	ExternalRoutedV4 = netip.MustParseAddr("172.30.0.251")
	ExternalRoutedV6 = netip.MustParseAddr("fd00:172:30::fb")
	// ExternalPorts are the ports the external host serves (TCP, UDP and SCTP).
	ExternalPorts = []responder.Port{
		{Number: 80, Protocol: responder.TCP}, {Number: 80, Protocol: responder.UDP}, {Number: 80, Protocol: responder.SCTP},
		{Number: 81, Protocol: responder.TCP}, {Number: 81, Protocol: responder.UDP},
	}
)

// ExternalIdentity is the identity in the external host's responder lines.
const ExternalIdentity = "external"

const (
	externalProcess = "external-host"
	externalLink    = "ext"
	witnessTable    = "witness"
)

// ExternalNetNS is the external host's network namespace.
func (l Layout) ExternalNetNS() string { return l.NetNSPrefix() + "ext" }

// ExternalAddrs are the external host's addresses in a sandbox of family f, ordinary
// ones first, IPv4 before IPv6.
func ExternalAddrs(f IPFamily) []netip.Addr {
	var out []netip.Addr
	if f.HasIPv4() {
		out = append(out, ExternalV4)
	}
	if f.HasIPv6() {
		out = append(out, ExternalV6)
	}
	if f.HasIPv4() {
		out = append(out, ExternalRoutedV4)
	}
	if f.HasIPv6() {
		out = append(out, ExternalRoutedV6)
	}
	return out
}

// externalHost creates the external host's namespace, plugs it into the underlay bridge,
// gives it its addresses and the witness, and starts its server.
func (u *upRun) externalHost() error {
	l := u.layout
	ns := l.ExternalNetNS()
	if err := run("ip", "netns", "add", ns); err != nil {
		return err
	}
	if err := run("ip", "link", "add", externalLink, "netns", l.UnderlayNetNS(), "type", "veth", "peer", "name", uplink, "netns", ns); err != nil {
		return err
	}
	if err := runIn(l.UnderlayNetNS(), "ip", "link", "set", externalLink, "master", underlayBridge, "up"); err != nil {
		return err
	}
	// A real host's NIC fills in TCP and UDP checksums; a veth leaves them to be
	// offloaded, and the nodes' userspace OVS datapath hands such packets on unfinished,
	// so the nodes' kernels would drop them. The external host computes them itself.
	cmds := [][]string{{"ip", "link", "set", "lo", "up"}, {"ip", "link", "set", uplink, "up"},
		{"ethtool", "-K", uplink, "tx", "off"}}
	for _, a := range ExternalAddrs(u.state.Family) {
		p := underlayPrefix(a.String())
		args := []string{"ip", "addr", "add", netip.PrefixFrom(a, p.Bits()).String(), "dev", uplink}
		if a.Is6() {
			args = append(args, "nodad")
		}
		if a == ExternalRoutedV4 || a == ExternalRoutedV6 {
			// Not a source of the host's own connections (deprecated): probes from the
			// external host come from its ordinary address.
			args = append(args, "preferred_lft", "0")
		}
		cmds = append(cmds, args)
	}
	for _, c := range cmds {
		if err := runIn(ns, c[0], c[1:]...); err != nil {
			return err
		}
	}
	if err := nftIn(ns, witnessScript(u.state.Family)); err != nil {
		return fmt.Errorf("external host witness: %w", err)
	}
	_, err := l.start(Process{Name: externalProcess, Path: u.opts.SelfPath, NetNS: ns,
		Args: []string{"--name", l.Name, "--root", l.Root, "external-host"}})
	return err
}

// witnessScript is the external host's nftables table: one set per family of (source,
// protocol) pairs seen in packets to its addresses.
func witnessScript(f IPFamily) string {
	var v4, v6 []string
	for _, a := range ExternalAddrs(f) {
		if a.Is4() {
			v4 = append(v4, a.String())
		} else {
			v6 = append(v6, a.String())
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "table inet %s {\n", witnessTable)
	b.WriteString("  set seen4 { type ipv4_addr . inet_proto; flags dynamic; size 65535; }\n")
	b.WriteString("  set seen6 { type ipv6_addr . inet_proto; flags dynamic; size 65535; }\n")
	b.WriteString("  chain prerouting {\n    type filter hook prerouting priority -300; policy accept;\n")
	if len(v4) > 0 {
		fmt.Fprintf(&b, "    ip daddr { %s } add @seen4 { ip saddr . meta l4proto }\n", strings.Join(v4, ", "))
	}
	if len(v6) > 0 {
		fmt.Fprintf(&b, "    ip6 daddr { %s } add @seen6 { ip6 saddr . meta l4proto }\n", strings.Join(v6, ", "))
	}
	b.WriteString("  }\n}\n")
	return b.String()
}

func nftIn(ns, script string) error {
	cmd := exec.Command("ip", "netns", "exec", ns, "nft", "-f", "-")
	cmd.Stdin = strings.NewReader(script)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("nft: %w: %s", err, strings.TrimSpace(string(out)))
	}
	return nil
}

// RunExternalHost serves the external host's ports until ctx ends. It runs inside the
// external host's namespace.
func RunExternalHost(ctx context.Context) error {
	r, err := responder.Serve(ctx, ExternalPorts, ExternalIdentity)
	if err != nil {
		return err
	}
	<-ctx.Done()
	return r.Close()
}

// Seen is a source address and IP protocol the external host saw a packet from.
type Seen struct {
	Source   netip.Addr
	Protocol uint8 // 1 ICMP, 6 TCP, 17 UDP, 58 ICMPv6, 132 SCTP
}

func (s Seen) String() string { return s.Source.String() + "/" + strconv.Itoa(int(s.Protocol)) }

// ExternalSeen lists what the external host's witness recorded since the last
// ResetExternalSeen, sorted.
func (l Layout) ExternalSeen() ([]Seen, error) {
	var out []Seen
	for _, set := range []string{"seen4", "seen6"} {
		b, err := exec.Command("ip", "netns", "exec", l.ExternalNetNS(), "nft", "-j", "list", "set", "inet", witnessTable, set).Output()
		if err != nil {
			return nil, fmt.Errorf("read the external host's witness (%s): %w", set, err)
		}
		seen, err := parseWitness(b)
		if err != nil {
			return nil, fmt.Errorf("witness set %s: %w", set, err)
		}
		out = append(out, seen...)
	}
	slices.SortFunc(out, func(a, b Seen) int {
		if c := a.Source.Compare(b.Source); c != 0 {
			return c
		}
		return int(a.Protocol) - int(b.Protocol)
	})
	return out, nil
}

// ResetExternalSeen empties the witness.
func (l Layout) ResetExternalSeen() error {
	for _, set := range []string{"seen4", "seen6"} {
		if out, err := exec.Command("ip", "netns", "exec", l.ExternalNetNS(), "nft", "flush", "set", "inet", witnessTable, set).CombinedOutput(); err != nil {
			return fmt.Errorf("reset the external host's witness: %w: %s", err, out)
		}
	}
	return nil
}

// parseWitness reads `nft -j list set` output: elements are {"concat": [addr, proto]},
// the protocol printed by name ("tcp") or number.
func parseWitness(b []byte) ([]Seen, error) {
	var doc struct {
		Nftables []struct {
			Set *struct {
				Elem []struct {
					Concat []any `json:"concat"`
				} `json:"elem"`
			} `json:"set"`
		} `json:"nftables"`
	}
	if err := json.Unmarshal(b, &doc); err != nil {
		return nil, err
	}
	var out []Seen
	for _, item := range doc.Nftables {
		if item.Set == nil {
			continue
		}
		for _, e := range item.Set.Elem {
			if len(e.Concat) != 2 {
				return nil, fmt.Errorf("element %v: want address . protocol", e.Concat)
			}
			s, _ := e.Concat[0].(string)
			addr, err := netip.ParseAddr(s)
			if err != nil {
				return nil, fmt.Errorf("element %v: %w", e.Concat, err)
			}
			proto, err := protocolNumber(e.Concat[1])
			if err != nil {
				return nil, fmt.Errorf("element %v: %w", e.Concat, err)
			}
			out = append(out, Seen{Source: addr, Protocol: proto})
		}
	}
	return out, nil
}

func protocolNumber(v any) (uint8, error) {
	switch p := v.(type) {
	case float64:
		return uint8(p), nil
	case string:
		names := map[string]uint8{"icmp": 1, "tcp": 6, "udp": 17, "ipv6-icmp": 58, "icmpv6": 58, "sctp": 132}
		if n, ok := names[p]; ok {
			return n, nil
		}
		n, err := strconv.ParseUint(p, 10, 8)
		return uint8(n), err
	}
	return 0, fmt.Errorf("protocol %v", v)
}
