package ovs

import (
	"context"
	"fmt"
	"net/netip"
	"strconv"
	"strings"
)

// ConntrackEntry is one connection of ovs-vswitchd's conntrack, as `ovs-appctl
// dpctl/dump-conntrack` prints it:
//
//	udp,orig=(src=10.244.1.5,dst=10.96.0.10,sport=40000,dport=80),reply=(src=10.244.2.10,dst=10.244.1.5,sport=8080,dport=40000),zone=65520
//
// Orig is the connection as its first packet came; Reply is what its answers look like,
// so after a destination NAT Reply's source is the translated address.
type ConntrackEntry struct {
	IPProto uint8 // 6, 17, 132, 1, 58; 0 for a protocol this parser does not name
	Zone    uint16
	Orig    ConntrackTuple
	Reply   ConntrackTuple
}

// ConntrackTuple is one direction of a ConntrackEntry; the ports are 0 for a protocol
// without them (ICMP).
type ConntrackTuple struct {
	Src, Dst netip.AddrPort
}

// conntrackProtocols are the protocol names dump-conntrack prints.
var conntrackProtocols = map[string]uint8{"icmp": 1, "tcp": 6, "udp": 17, "icmpv6": 58, "sctp": 132}

// ParseConntrack parses the output of `dpctl/dump-conntrack` (with or without -m), one
// entry a line; blank lines are skipped.
func ParseConntrack(text string) ([]ConntrackEntry, error) {
	var out []ConntrackEntry
	for i, line := range strings.Split(text, "\n") {
		line = strings.TrimSpace(line)
		if line == "" {
			continue
		}
		e, err := parseConntrackLine(line)
		if err != nil {
			return nil, fmt.Errorf("conntrack dump line %d %q: %w", i+1, line, err)
		}
		out = append(out, e)
	}
	return out, nil
}

func parseConntrackLine(line string) (ConntrackEntry, error) {
	var e ConntrackEntry
	proto, rest, ok := strings.Cut(line, ",")
	if !ok {
		return e, fmt.Errorf("no fields after the protocol")
	}
	e.IPProto = conntrackProtocols[proto]
	var haveOrig, haveReply bool
	for rest != "" {
		var key, value string
		key, rest, _ = strings.Cut(rest, "=")
		if strings.HasPrefix(rest, "(") {
			end := strings.Index(rest, ")")
			if end < 0 {
				return e, fmt.Errorf("%s: no closing parenthesis", key)
			}
			value, rest = rest[1:end], strings.TrimPrefix(rest[end+1:], ",")
		} else {
			value, rest, _ = strings.Cut(rest, ",")
		}
		var err error
		switch key {
		case "orig":
			e.Orig, err = parseConntrackTuple(value)
			haveOrig = true
		case "reply":
			e.Reply, err = parseConntrackTuple(value)
			haveReply = true
		case "zone":
			var z uint64
			z, err = strconv.ParseUint(value, 10, 16)
			e.Zone = uint16(z)
		}
		if err != nil {
			return e, fmt.Errorf("%s: %w", key, err)
		}
	}
	if !haveOrig || !haveReply {
		return e, fmt.Errorf("want both an orig and a reply tuple")
	}
	return e, nil
}

// parseConntrackTuple parses "src=A,dst=B,sport=P,dport=Q" (ICMP tuples carry id, type
// and code instead of ports, which are left 0).
func parseConntrackTuple(s string) (ConntrackTuple, error) {
	var src, dst netip.Addr
	var sport, dport uint16
	for _, kv := range strings.Split(s, ",") {
		key, value, _ := strings.Cut(kv, "=")
		var err error
		switch key {
		case "src":
			src, err = netip.ParseAddr(value)
		case "dst":
			dst, err = netip.ParseAddr(value)
		case "sport", "dport":
			var p uint64
			p, err = strconv.ParseUint(value, 10, 16)
			if key == "sport" {
				sport = uint16(p)
			} else {
				dport = uint16(p)
			}
		}
		if err != nil {
			return ConntrackTuple{}, fmt.Errorf("%s: %w", key, err)
		}
	}
	if !src.IsValid() || !dst.IsValid() {
		return ConntrackTuple{}, fmt.Errorf("want src and dst addresses")
	}
	return ConntrackTuple{Src: netip.AddrPortFrom(src, sport), Dst: netip.AddrPortFrom(dst, dport)}, nil
}

// DumpConntrack lists the conntrack entries of zone.
func (v *Vswitchd) DumpConntrack(ctx context.Context, zone uint16) ([]ConntrackEntry, error) {
	out, err := v.run(ctx, "dpctl/dump-conntrack", fmt.Sprintf("zone=%d", zone))
	if err != nil {
		return nil, fmt.Errorf("dump conntrack zone %d: %w", zone, err)
	}
	entries, err := ParseConntrack(out)
	if err != nil {
		return nil, fmt.Errorf("dump conntrack zone %d: %w", zone, err)
	}
	return entries, nil
}

// ConntrackFlows selects the connections of one zone and protocol whose first packet went
// to OrigDst and whose answers come from ReplySrc: after a destination NAT, the
// connections a frontend (a Service's address and port) sent to one backend.
type ConntrackFlows struct {
	Zone     uint16
	IPProto  uint8
	OrigDst  netip.AddrPort
	ReplySrc netip.AddrPort
}

// Args are the dpctl/flush-conntrack arguments that select f: the zone, a partial
// original tuple and a partial reply tuple (OVS 3.1 flushes by partial tuples).
func (f ConntrackFlows) Args() []string {
	nw := "ct_nw"
	if f.OrigDst.Addr().Is6() {
		nw = "ct_ipv6"
	}
	orig := fmt.Sprintf("%s_dst=%s,ct_nw_proto=%d,ct_tp_dst=%d", nw, f.OrigDst.Addr(), f.IPProto, f.OrigDst.Port())
	reply := fmt.Sprintf("%s_src=%s,ct_tp_src=%d", nw, f.ReplySrc.Addr(), f.ReplySrc.Port())
	return []string{fmt.Sprintf("zone=%d", f.Zone), orig, reply}
}

// FlushConntrackFlows removes the conntrack entries f selects (none is no error).
func (v *Vswitchd) FlushConntrackFlows(ctx context.Context, f ConntrackFlows) error {
	if !f.OrigDst.IsValid() || !f.ReplySrc.IsValid() || f.OrigDst.Addr().Is6() != f.ReplySrc.Addr().Is6() {
		return fmt.Errorf("flush conntrack: want an original destination and a reply source of one family, got %s and %s",
			f.OrigDst, f.ReplySrc)
	}
	if _, err := v.run(ctx, append([]string{"dpctl/flush-conntrack"}, f.Args()...)...); err != nil {
		return fmt.Errorf("flush conntrack zone %d, protocol %d, to %s answered by %s: %w", f.Zone, f.IPProto, f.OrigDst, f.ReplySrc, err)
	}
	return nil
}
