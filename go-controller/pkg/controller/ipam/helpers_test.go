package ipam

import (
	"net/netip"
	"strconv"
	"strings"
	"testing"
	"time"
)

// fakeClock is a settable clock for quarantine tests.
type fakeClock struct{ t time.Time }

func newFakeClock() *fakeClock { return &fakeClock{t: time.Date(2026, 1, 2, 15, 0, 0, 0, time.UTC)} }

func (c *fakeClock) Now() time.Time          { return c.t }
func (c *fakeClock) Advance(d time.Duration) { c.t = c.t.Add(d) }

func prefix(s string) netip.Prefix { return netip.MustParsePrefix(s) }
func addr(s string) netip.Addr     { return netip.MustParseAddr(s) }

// wantErrContains fails unless err is non-nil and contains every fragment.
func wantErrContains(t *testing.T, err error, fragments ...string) {
	t.Helper()
	if err == nil {
		t.Fatalf("got no error, want one containing %q", fragments)
	}
	for _, f := range fragments {
		if !strings.Contains(err.Error(), f) {
			t.Errorf("error %q does not contain %q", err, f)
		}
	}
}

func newPool(t testing.TB, block string, opts PoolOptions) *AddressPool {
	t.Helper()
	p, err := NewAddressPool(prefix(block), opts)
	if err != nil {
		t.Fatalf("NewAddressPool(%s): %v", block, err)
	}
	return p
}

// allocateIP allocates for key and returns the bare IP, failing the test on error.
func allocateIP(t testing.TB, p *AddressPool, key string) netip.Addr {
	t.Helper()
	a, err := p.Allocate(key)
	if err != nil {
		t.Fatalf("Allocate(%q): %v", key, err)
	}
	return a.Address.Addr()
}

// allocateN allocates keys prefix0..prefix(n-1) and returns their IPs as strings.
func allocateN(t testing.TB, p *AddressPool, keyPrefix string, n int) []string {
	t.Helper()
	var got []string
	for i := range n {
		got = append(got, allocateIP(t, p, keyPrefix+itoa(i)).String())
	}
	return got
}

func itoa(i int) string { return strconv.Itoa(i) }
