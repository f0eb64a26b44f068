package ipam

import (
	"fmt"
	"net"
	"net/netip"
)

// MAC is an Ethernet address. Its text form is "0a:58:0a:f4:01:05".
type MAC [6]byte

// The first two bytes of every derived MAC: locally administered, unicast, the
// OVN/Kubernetes convention.
const macPrefix0, macPrefix1 = 0x0a, 0x58

// DeriveMAC returns the MAC of an interface with the given IPs: 0a:58: and the
// four bytes of its first IPv4 address or, with no IPv4 address, the low 32
// bits of its first IPv6 address. A pod's MAC derives from the pod's IPs and a
// gateway's from the gateway IPs. Derived MACs are unique within a node block
// (IPv6 addresses of a block differ in their low 32 bits while fewer than 2^32
// were handed out) and need not be unique across nodes, since traffic between
// nodes is routed. It returns the zero MAC when ips has no valid address.
func DeriveMAC(ips ...netip.Addr) MAC {
	var v6 netip.Addr
	for _, ip := range ips {
		ip = ip.Unmap()
		if ip.Is4() {
			return macFromLow32(ip.As16())
		}
		if ip.Is6() && !v6.IsValid() {
			v6 = ip
		}
	}
	if !v6.IsValid() {
		return MAC{}
	}
	return macFromLow32(v6.As16())
}

func macFromLow32(b [16]byte) MAC {
	return MAC{macPrefix0, macPrefix1, b[12], b[13], b[14], b[15]}
}

// ParseMAC parses a 6-byte MAC in the colon form.
func ParseMAC(s string) (MAC, error) {
	hw, err := net.ParseMAC(s)
	if err != nil {
		return MAC{}, fmt.Errorf("parse MAC %q: %w", s, err)
	}
	if len(hw) != len(MAC{}) {
		return MAC{}, fmt.Errorf("parse MAC %q: not a 6-byte Ethernet address", s)
	}
	return MAC(hw), nil
}

// String returns the colon form, e.g. "0a:58:0a:f4:01:05".
func (m MAC) String() string {
	return fmt.Sprintf("%02x:%02x:%02x:%02x:%02x:%02x", m[0], m[1], m[2], m[3], m[4], m[5])
}

// IsZero reports whether m is 00:00:00:00:00:00.
func (m MAC) IsZero() bool { return m == MAC{} }

// IsUnicast reports whether m is a non-zero unicast address.
func (m MAC) IsUnicast() bool { return !m.IsZero() && m[0]&1 == 0 }

// MarshalText returns the colon form.
func (m MAC) MarshalText() ([]byte, error) { return []byte(m.String()), nil }

// UnmarshalText parses the colon form.
func (m *MAC) UnmarshalText(b []byte) error {
	v, err := ParseMAC(string(b))
	if err != nil {
		return err
	}
	*m = v
	return nil
}
