package sandbox

import (
	"net/netip"
	"strings"
	"testing"
)

func TestParseWitness(t *testing.T) {
	seen, err := parseWitness([]byte(`{"nftables": [{"metainfo": {"version": "1.0.6"}}, {"set": {"family": "inet", "name": "seen4",
		"elem": [{"concat": ["10.0.0.2", "icmp"]}, {"concat": ["10.0.0.1", "tcp"]}, {"concat": ["fd00::1", "ipv6-icmp"]}, {"concat": ["10.0.0.3", 47]}]}}]}`))
	if err != nil {
		t.Fatal(err)
	}
	want := []Seen{{netip.MustParseAddr("10.0.0.2"), 1}, {netip.MustParseAddr("10.0.0.1"), 6}, {netip.MustParseAddr("fd00::1"), 58}, {netip.MustParseAddr("10.0.0.3"), 47}}
	if len(seen) != len(want) {
		t.Fatalf("got %v, want %v", seen, want)
	}
	for i := range want {
		if seen[i] != want[i] {
			t.Errorf("element %d: got %v, want %v", i, seen[i], want[i])
		}
	}
}

func TestWitnessWatchesEveryExternalAddressOfTheFamilies(t *testing.T) {
	s := witnessScript(IPv4)
	if !strings.Contains(s, "ip daddr { 172.30.0.250, 172.30.0.251 } add @seen4") || strings.Contains(s, "ip6 daddr") {
		t.Errorf("IPv4 witness:\n%s", s)
	}
	if s := witnessScript(DualStack); !strings.Contains(s, "ip6 daddr { fd00:172:30::fa, fd00:172:30::fb } add @seen6") {
		t.Errorf("dual-stack witness:\n%s", s)
	}
}
