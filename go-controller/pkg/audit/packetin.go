package audit

import (
	"bufio"
	"fmt"
	"io"
	"net/netip"
	"strconv"
	"strings"
)

// PacketIn is one NXT_PACKET_IN2 as `ovs-ofctl monitor` prints it: the flow that sent it
// (table and cookie), the action's userdata, and the packet's fields.
type PacketIn struct {
	Table    uint8
	Cookie   uint64
	UserData []byte
	// Fields are the header line's metadata (in_port, reg0, ...) and the packet line's
	// fields (nw_src, tp_dst, ...), as printed; Proto is the packet line's first word
	// (tcp, udp6, icmp, ...).
	Fields map[string]string
	Proto  string
}

// Addr returns the packet's source or destination address.
func (p PacketIn) Addr(src bool) (netip.Addr, bool) {
	keys := map[bool][2]string{true: {"nw_src", "ipv6_src"}, false: {"nw_dst", "ipv6_dst"}}[src]
	for _, k := range keys {
		if a, err := netip.ParseAddr(p.Fields[k]); err == nil {
			return a, true
		}
	}
	return netip.Addr{}, false
}

// Port returns tp_src or tp_dst (0 when the packet has none).
func (p PacketIn) Port(src bool) uint16 {
	k := "tp_dst"
	if src {
		k = "tp_src"
	}
	n, _ := strconv.ParseUint(p.Fields[k], 10, 16)
	return uint16(n)
}

// Protocol is the packet's transport protocol as NetworkPolicy names it (TCP, UDP, SCTP),
// or ICMP, or the first word of the packet line.
func (p PacketIn) Protocol() string {
	switch strings.TrimSuffix(p.Proto, "6") {
	case "tcp":
		return "TCP"
	case "udp":
		return "UDP"
	case "sctp":
		return "SCTP"
	case "icmp":
		return "ICMP"
	}
	return p.Proto
}

// ScanPacketIns reads `ovs-ofctl -O OpenFlow15 --no-names monitor BRIDGE 65535 -P
// nxt_packet_in2` output and calls fn for each complete packet-in (a header line, its
// userdata line, its packet line). Other messages are skipped.
func ScanPacketIns(r io.Reader, fn func(PacketIn)) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	var cur *PacketIn
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "NXT_PACKET_IN2"):
			p, err := parseHeader(line)
			if err != nil {
				cur = nil
				continue
			}
			cur = &p
		case cur == nil:
		case strings.HasPrefix(line, " userdata="):
			cur.UserData = parseHex(strings.TrimPrefix(line, " userdata="))
		case strings.HasPrefix(line, " "):
			// continuation or other detail lines of the message
		default:
			parsePacketLine(cur, line)
			fn(*cur)
			cur = nil
		}
	}
	return sc.Err()
}

// parseHeader reads "NXT_PACKET_IN2 (OF1.5) (xid=0x0): table_id=70 cookie=0x... total_len=54
// reg1=0x3,in_port=3 (via action) data_len=54 (unbuffered)".
func parseHeader(line string) (PacketIn, error) {
	p := PacketIn{Fields: map[string]string{}}
	_, rest, ok := strings.Cut(line, "): ")
	if !ok {
		return p, fmt.Errorf("packet-in header %q", line)
	}
	for _, word := range strings.Fields(rest) {
		for _, kv := range strings.Split(word, ",") {
			k, v, ok := strings.Cut(kv, "=")
			if !ok {
				continue
			}
			switch k {
			case "table_id":
				n, err := strconv.ParseUint(v, 10, 8)
				if err != nil {
					return p, fmt.Errorf("packet-in table %q", v)
				}
				p.Table = uint8(n)
			case "cookie":
				n, err := strconv.ParseUint(strings.TrimPrefix(v, "0x"), 16, 64)
				if err != nil {
					return p, fmt.Errorf("packet-in cookie %q", v)
				}
				p.Cookie = n
			default:
				p.Fields[k] = v
			}
		}
	}
	return p, nil
}

// parsePacketLine reads "tcp,vlan_tci=0x0000,...,nw_src=10.244.1.5,...,tp_dst=80,tcp_flags=syn tcp_csum:0".
func parsePacketLine(p *PacketIn, line string) {
	first, _, _ := strings.Cut(line, " ")
	for i, kv := range strings.Split(first, ",") {
		k, v, ok := strings.Cut(kv, "=")
		if !ok {
			if i == 0 {
				p.Proto = kv
			}
			continue
		}
		p.Fields[k] = v
	}
}

// parseHex reads "01.02.0a" (ovs-ofctl's bytes).
func parseHex(s string) []byte {
	var out []byte
	for _, h := range strings.Split(strings.TrimSpace(s), ".") {
		n, err := strconv.ParseUint(h, 16, 8)
		if err != nil {
			return out
		}
		out = append(out, byte(n))
	}
	return out
}
