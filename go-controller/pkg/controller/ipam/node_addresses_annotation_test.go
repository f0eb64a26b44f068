package ipam

import (
	"net/netip"
	"slices"
	"strings"
	"testing"
)

func TestNodeAddressesAnnotationRoundTrips(t *testing.T) {
	for _, addrs := range [][]netip.Addr{
		nil,
		{netip.MustParseAddr("172.31.0.2")},
		{netip.MustParseAddr("172.31.0.2"), netip.MustParseAddr("fd00:172:31::2")},
	} {
		value, err := NodeAddressesAnnotation(addrs)
		if err != nil {
			t.Fatalf("%v: %v", addrs, err)
		}
		got, err := ParseNodeAddressesAnnotation(value)
		if err != nil {
			t.Fatalf("%s: %v", value, err)
		}
		if !slices.Equal(got, addrs) && !(len(got) == 0 && len(addrs) == 0) {
			t.Errorf("%v encodes to %s, reads back %v", addrs, value, got)
		}
	}
}

func TestNodeAddressesAnnotationRefusesWhatIsNoHostAddress(t *testing.T) {
	for value, want := range map[string]string{
		`{"addresses":["172.31.0.2","172.31.0.2"]}`: `field "addresses[1]": 172.31.0.2 listed twice`,
		`{"addresses":["0.0.0.0"]}`:                 "is not a host address",
		`{"addresses":["fe80::1%eth0"]}`:            "want a plain IPv4 or IPv6 address",
		`{"addresses":["::ffff:1.2.3.4"]}`:          "want a plain IPv4 or IPv6 address",
		`{"addresses":["nope"]}`:                    "invalid kovs.io/node-addresses annotation",
		`[]`:                                        "invalid kovs.io/node-addresses annotation",
	} {
		_, err := ParseNodeAddressesAnnotation(value)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: got %v, want an error with %q", value, err, want)
		}
	}
}

func FuzzParseNodeAddressesAnnotation(f *testing.F) {
	f.Add(`{"addresses":["172.31.0.2","fd00:172:31::2"]}`)
	f.Add(`{"addresses":[]}`)
	f.Add(`{"addresses":["172.31.0.2","172.31.0.2"]}`)
	f.Add(`{"addresses":["fe80::1%eth0"]}`)
	f.Fuzz(func(t *testing.T, value string) {
		addrs, err := ParseNodeAddressesAnnotation(value)
		if err != nil {
			return
		}
		enc, err := NodeAddressesAnnotation(addrs)
		if err != nil {
			t.Fatalf("%q parsed to %v, which does not encode: %v", value, addrs, err)
		}
		again, err := ParseNodeAddressesAnnotation(enc)
		if err != nil || !slices.Equal(addrs, again) {
			t.Fatalf("%q: %v encoded to %q parse to %v (%v)", value, addrs, enc, again, err)
		}
	})
}
