package responder

import (
	"net/netip"
	"strings"
	"testing"
)

func TestLineRoundTrip(t *testing.T) {
	for _, l := range []Line{
		{Identity: "default/web-0", Port: Port{80, TCP}, Peer: netip.MustParseAddrPort("10.244.1.5:40000")},
		{Identity: "x", Port: Port{53, UDP}, Peer: netip.MustParseAddrPort("[fd00::1]:5353")},
	} {
		wire := string(l.Marshal())
		if !strings.HasSuffix(wire, "\n") || strings.Count(wire, "\n") != 1 {
			t.Errorf("Marshal() = %q, want one line", wire)
		}
		got, err := ParseLine(wire)
		if err != nil || got != l {
			t.Errorf("ParseLine(%q) = %+v, %v; want %+v", wire, got, err, l)
		}
	}
	const wire = "kovs-responder identity=ns/p port=8080/tcp peer=[fd00::2]:1234\n"
	l, _ := ParseLine(wire)
	if string(l.Marshal()) != wire {
		t.Errorf("Marshal() = %q, want %q", l.Marshal(), wire)
	}
}

func TestParseLineErrors(t *testing.T) {
	for s, want := range map[string]string{
		"":                                      "not a responder line",
		"HTTP/1.1 200 OK":                       "not a responder line",
		"kovs-responder identity=a port=80/tcp": "missing peer=",
		"kovs-responder identity=a port=80/tcp peer=nope":         "peer",
		"kovs-responder identity=a port=80 peer=1.2.3.4:5":        "missing /PROTO",
		"kovs-responder identity=a port=80/xyz peer=1.2.3.4:5":    "unknown protocol",
		"kovs-responder identity port=80/tcp peer=1.2.3.4:5":      "not key=value",
		"kovs-responder identity= port=80/tcp peer=1.2.3.4:5":     "empty identity",
		"kovs-responder port=80/tcp peer=1.2.3.4:5 extra=ignored": "missing identity=",
	} {
		_, err := ParseLine(s)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("ParseLine(%q) error = %v, want it to contain %q", s, err, want)
		}
	}
	if _, err := ParseLine("kovs-responder identity=a port=80/tcp peer=1.2.3.4:5 future=x\r\n"); err != nil {
		t.Errorf("unknown field or CRLF rejected: %v", err)
	}
}

func TestParsePort(t *testing.T) {
	if p, err := ParsePort("132/SCTP"); err != nil || p != (Port{132, SCTP}) {
		t.Errorf("ParsePort(132/SCTP) = %v, %v", p, err)
	}
	for s, want := range map[string]string{
		"80":        "missing /PROTO",
		"/tcp":      "missing port number",
		"0/tcp":     "want 1-65535",
		"65536/tcp": "want 1-65535",
		"80/":       "missing protocol",
		"80/icmp":   "unknown protocol",
	} {
		_, err := ParsePort(s)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("ParsePort(%q) error = %v, want it to contain %q", s, err, want)
		}
	}
}

func TestParseTarget(t *testing.T) {
	for s, want := range map[string]Target{
		"10.0.0.5:80/tcp":         {netip.MustParseAddr("10.0.0.5"), Port{80, TCP}},
		"[fd00::1]:53/UDP":        {netip.MustParseAddr("fd00::1"), Port{53, UDP}},
		"[::ffff:1.2.3.4]:9/sctp": {netip.MustParseAddr("1.2.3.4"), Port{9, SCTP}},
	} {
		got, err := ParseTarget(s)
		if err != nil || got != want {
			t.Errorf("ParseTarget(%q) = %v, %v; want %v", s, got, err, want)
		}
	}
	if got := (Target{netip.MustParseAddr("fd00::1"), Port{80, TCP}}).String(); got != "[fd00::1]:80/tcp" {
		t.Errorf("String() = %q", got)
	}
	for s, want := range map[string]string{
		"10.0.0.5:80":           "missing /PROTO",
		"10.0.0.5/tcp":          "missing :PORT",
		"fd00::1:80/tcp":        "must be in brackets",
		"[fd00::1/tcp":          "missing ]",
		"[fd00::1]/tcp":         "missing :PORT",
		"example.com:80/tcp":    "not an IP address",
		":80/tcp":               "missing host",
		"10.0.0.5:http/tcp":     "invalid port number",
		"10.0.0.5:80/icmp":      "unknown protocol",
		"[fe80::1%eth0]:80/tcp": "zones are not supported",
	} {
		_, err := ParseTarget(s)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("ParseTarget(%q) error = %v, want it to contain %q", s, err, want)
		}
	}
}
