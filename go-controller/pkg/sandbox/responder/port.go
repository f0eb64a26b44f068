package responder

import (
	"fmt"
	"strconv"
	"strings"
)

// Protocol is a transport protocol the responder serves and the probe speaks.
// Its value is the lower-case name used in port and target strings.
type Protocol string

// The protocols a Port can carry.
const (
	TCP  Protocol = "tcp"
	UDP  Protocol = "udp"
	SCTP Protocol = "sctp"
)

// ParseProtocol parses "tcp", "udp" or "sctp", in any case (Kubernetes spells
// them "TCP", "UDP" and "SCTP").
func ParseProtocol(s string) (Protocol, error) {
	p := Protocol(strings.ToLower(s))
	switch p {
	case TCP, UDP, SCTP:
		return p, nil
	case "":
		return "", fmt.Errorf("missing protocol (want tcp, udp or sctp)")
	default:
		return "", fmt.Errorf("unknown protocol %q (want tcp, udp or sctp)", s)
	}
}

// Port is a transport port number together with its protocol, written "80/tcp".
type Port struct {
	Number   uint16
	Protocol Protocol
}

// ParsePort parses "NUMBER/PROTO", for example "8080/tcp" or "53/UDP".
func ParsePort(s string) (Port, error) {
	num, proto, ok := strings.Cut(s, "/")
	if !ok {
		return Port{}, fmt.Errorf("port %q: missing /PROTO (as in 80/tcp)", s)
	}
	n, err := parsePortNumber(num)
	if err != nil {
		return Port{}, fmt.Errorf("port %q: %w", s, err)
	}
	p, err := ParseProtocol(proto)
	if err != nil {
		return Port{}, fmt.Errorf("port %q: %w", s, err)
	}
	return Port{Number: n, Protocol: p}, nil
}

// parsePortNumber parses a decimal port number in 1-65535.
func parsePortNumber(s string) (uint16, error) {
	if s == "" {
		return 0, fmt.Errorf("missing port number")
	}
	n, err := strconv.ParseUint(s, 10, 16)
	if err != nil || n == 0 {
		return 0, fmt.Errorf("invalid port number %q (want 1-65535)", s)
	}
	return uint16(n), nil
}

// String returns the port as "NUMBER/PROTO".
func (p Port) String() string {
	return fmt.Sprintf("%d/%s", p.Number, p.Protocol)
}

// normalize checks that the port can be served or probed and returns it with
// its protocol in canonical (lower-case) form.
func (p Port) normalize() (Port, error) {
	if p.Number == 0 {
		return Port{}, fmt.Errorf("port %s: port number 0 is not allowed", p)
	}
	proto, err := ParseProtocol(string(p.Protocol))
	if err != nil {
		return Port{}, fmt.Errorf("port %s: %w", p, err)
	}
	return Port{Number: p.Number, Protocol: proto}, nil
}

// MarshalText encodes the port as "NUMBER/PROTO".
func (p Port) MarshalText() ([]byte, error) {
	return []byte(p.String()), nil
}

// UnmarshalText decodes a port written "NUMBER/PROTO".
func (p *Port) UnmarshalText(b []byte) error {
	v, err := ParsePort(string(b))
	if err != nil {
		return err
	}
	*p = v
	return nil
}
