package ipam

import (
	"net/netip"
	"testing"
)

func TestDeriveMAC(t *testing.T) {
	tests := []struct {
		name string
		ips  []string
		want string
	}{
		{"IPv4 pod", []string{"10.244.1.5"}, "0a:58:0a:f4:01:05"},
		{"IPv4 gateway", []string{"10.244.1.1"}, "0a:58:0a:f4:01:01"},
		{"dual-stack uses IPv4 wherever it is", []string{"fd00:10:244:1::5", "10.244.1.5"}, "0a:58:0a:f4:01:05"},
		{"IPv6 only: low 32 bits", []string{"fd00:10:244:1::a:bc01:2345"}, "0a:58:bc:01:23:45"},
		{"IPv6 gateway", []string{"fd00:10:244:1::1"}, "0a:58:00:00:00:01"},
		{"IPv4-mapped counts as IPv4", []string{"::ffff:10.244.1.5"}, "0a:58:0a:f4:01:05"},
		{"no address", nil, "00:00:00:00:00:00"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var ips []netip.Addr
			for _, s := range tt.ips {
				ips = append(ips, addr(s))
			}
			got := DeriveMAC(ips...)
			if got.String() != tt.want {
				t.Errorf("DeriveMAC(%v) = %s, want %s", tt.ips, got, tt.want)
			}
			if len(ips) > 0 && !got.IsUnicast() {
				t.Errorf("%s is not unicast", got)
			}
		})
	}
}

func TestParseMAC(t *testing.T) {
	m, err := ParseMAC("0A:58:0a:f4:01:05")
	if err != nil || m != (MAC{0x0a, 0x58, 0x0a, 0xf4, 0x01, 0x05}) {
		t.Errorf("ParseMAC = %s, %v", m, err)
	}
	for _, bad := range []string{"", "0a:58:0a:f4:01", "zz:58:0a:f4:01:05", "00:00:00:00:fe:80:00:00:00:00:00:00:02:00:5e:10:00:00:00:01"} {
		if _, err := ParseMAC(bad); err == nil {
			t.Errorf("ParseMAC(%q) succeeded", bad)
		}
	}
	var back MAC
	text, _ := m.MarshalText()
	if err := back.UnmarshalText(text); err != nil || back != m {
		t.Errorf("text round trip: %s, %v", back, err)
	}
}
