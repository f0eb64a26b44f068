package sandbox

import "testing"

// TestFreePortsBelowTheEphemeralRange: the sandbox's listener ports are distinct and
// never ones the kernel may give an outgoing connection as its source port.
func TestFreePortsBelowTheEphemeralRange(t *testing.T) {
	first, n := portsBelowEphemeral()
	if first < 1024 || n <= 0 {
		t.Fatalf("range %d+%d", first, n)
	}
	taken := map[int]bool{}
	for range 50 {
		if _, err := freePort(taken); err != nil {
			t.Fatal(err)
		}
	}
	if len(taken) != 50 {
		t.Errorf("50 picks gave %d distinct ports", len(taken))
	}
	for p := range taken {
		if p < first || p >= first+n {
			t.Errorf("port %d outside %d-%d, below the ephemeral range", p, first, first+n-1)
		}
	}
}
