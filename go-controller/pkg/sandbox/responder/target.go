package responder

import (
	"fmt"
	"net/netip"
	"strings"
)

// Target is what a probe connects to: an IP address and a port with its
// protocol. Written HOST:PORT/PROTO, with an IPv6 host in brackets.
type Target struct {
	Addr netip.Addr
	Port Port
}

// ParseTarget parses "HOST:PORT/PROTO", for example "10.0.0.5:80/tcp" or
// "[fd00::5]:53/udp". HOST must be an IP literal; names are not resolved.
func ParseTarget(s string) (Target, error) {
	hostPort, proto, ok := strings.Cut(s, "/")
	if !ok {
		return Target{}, fmt.Errorf("target %q: missing /PROTO (as in 10.0.0.5:80/tcp)", s)
	}
	host, port, err := splitHostPort(hostPort)
	if err != nil {
		return Target{}, fmt.Errorf("target %q: %w", s, err)
	}
	addr, err := parseTargetAddr(host)
	if err != nil {
		return Target{}, fmt.Errorf("target %q: %w", s, err)
	}
	p, err := ParsePort(port + "/" + proto)
	if err != nil {
		return Target{}, fmt.Errorf("target %q: %w", s, err)
	}
	return Target{Addr: addr, Port: p}, nil
}

// splitHostPort splits "HOST:PORT" or "[HOST]:PORT", saying what is wrong when
// it cannot.
func splitHostPort(s string) (host, port string, err error) {
	if strings.HasPrefix(s, "[") {
		end := strings.Index(s, "]")
		if end < 0 {
			return "", "", fmt.Errorf("missing ] after IPv6 address")
		}
		host, rest := s[1:end], s[end+1:]
		if !strings.HasPrefix(rest, ":") {
			return "", "", fmt.Errorf("missing :PORT after [%s]", host)
		}
		return host, rest[1:], nil
	}
	switch strings.Count(s, ":") {
	case 0:
		return "", "", fmt.Errorf("missing :PORT after host %q", s)
	case 1:
		host, port, _ := strings.Cut(s, ":")
		return host, port, nil
	default:
		return "", "", fmt.Errorf("IPv6 address must be in brackets, as in [fd00::1]:80/tcp")
	}
}

// parseTargetAddr parses the host part of a target: an IP literal without a zone.
func parseTargetAddr(host string) (netip.Addr, error) {
	if host == "" {
		return netip.Addr{}, fmt.Errorf("missing host")
	}
	addr, err := netip.ParseAddr(host)
	if err != nil {
		return netip.Addr{}, fmt.Errorf("host %q is not an IP address (names are not resolved)", host)
	}
	if addr.Zone() != "" {
		return netip.Addr{}, fmt.Errorf("host %q: IPv6 zones are not supported", host)
	}
	return addr.Unmap(), nil
}

// String returns the target as "HOST:PORT/PROTO".
func (t Target) String() string {
	return fmt.Sprintf("%s/%s", netip.AddrPortFrom(t.Addr, t.Port.Number), t.Port.Protocol)
}

// addrPort returns the target's address and port.
func (t Target) addrPort() netip.AddrPort {
	return netip.AddrPortFrom(t.Addr, t.Port.Number)
}

// MarshalText encodes the target as "HOST:PORT/PROTO".
func (t Target) MarshalText() ([]byte, error) {
	return []byte(t.String()), nil
}

// UnmarshalText decodes a target written "HOST:PORT/PROTO".
func (t *Target) UnmarshalText(b []byte) error {
	v, err := ParseTarget(string(b))
	if err != nil {
		return err
	}
	*t = v
	return nil
}
