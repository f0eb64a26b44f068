package responder

import (
	"fmt"
	"net/netip"
	"strings"
	"unicode"
)

// linePrefix starts every responder line, so a probe can tell the responder
// from any other server that happens to listen on the port.
const linePrefix = "kovs-responder"

// Line is what the responder answers on every port: who it is, which port was
// hit, and the peer address it saw (after any NAT on the way). It is the whole
// reply for TCP and UDP and the State Cookie of an SCTP INIT-ACK. On the wire:
//
//	kovs-responder identity=<identity> port=<n>/<proto> peer=<ip>:<port>\n
//
// with an IPv6 peer in brackets, as in peer=[fd00::1]:40000.
type Line struct {
	Identity string         `json:"identity"`
	Port     Port           `json:"port"`
	Peer     netip.AddrPort `json:"peer"`
}

// String returns the line without its trailing newline.
func (l Line) String() string {
	return fmt.Sprintf("%s identity=%s port=%s peer=%s", linePrefix, l.Identity, l.Port, l.Peer)
}

// Marshal returns the line as sent on the wire, newline included.
func (l Line) Marshal() []byte {
	return []byte(l.String() + "\n")
}

// ParseLine parses a responder line; a trailing newline (or CRLF) is allowed.
// Fields it does not know are ignored, so the format can grow.
func ParseLine(s string) (Line, error) {
	fields := strings.Fields(strings.TrimRight(s, "\r\n"))
	if len(fields) == 0 || fields[0] != linePrefix {
		return Line{}, fmt.Errorf("not a responder line (want prefix %q): %q", linePrefix, truncate(s, 80))
	}
	var l Line
	seen := map[string]bool{}
	for _, f := range fields[1:] {
		key, value, ok := strings.Cut(f, "=")
		if !ok {
			return Line{}, fmt.Errorf("responder line: field %q is not key=value", f)
		}
		if err := l.setField(key, value); err != nil {
			return Line{}, fmt.Errorf("responder line: %w", err)
		}
		seen[key] = true
	}
	for _, key := range []string{"identity", "port", "peer"} {
		if !seen[key] {
			return Line{}, fmt.Errorf("responder line: missing %s= field", key)
		}
	}
	return l, nil
}

// setField stores one key=value field of a responder line.
func (l *Line) setField(key, value string) error {
	switch key {
	case "identity":
		if err := validateIdentity(value); err != nil {
			return err
		}
		l.Identity = value
	case "port":
		p, err := ParsePort(value)
		if err != nil {
			return err
		}
		l.Port = p
	case "peer":
		ap, err := netip.ParseAddrPort(value)
		if err != nil {
			return fmt.Errorf("peer %q: %w", value, err)
		}
		l.Peer = ap
	}
	return nil
}

// validateIdentity checks that an identity fits in one line field: not empty,
// printable, and without spaces.
func validateIdentity(id string) error {
	if id == "" {
		return fmt.Errorf("empty identity")
	}
	for _, r := range id {
		if unicode.IsSpace(r) || !unicode.IsPrint(r) {
			return fmt.Errorf("identity %q: contains a space or unprintable character", id)
		}
	}
	return nil
}

// truncate shortens s to at most n bytes for error messages.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}
