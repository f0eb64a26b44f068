package ipam

import (
	"errors"
	"runtime"
	"testing"
	"time"
)

func TestAddressPoolReservedAddresses(t *testing.T) {
	tests := []struct {
		block       string
		wantGateway string
		wantAll     []string // every address handed out before exhaustion, in order
	}{
		{"10.244.1.0/29", "10.244.1.1", []string{"10.244.1.2", "10.244.1.3", "10.244.1.4", "10.244.1.5", "10.244.1.6"}},
		{"10.244.1.0/30", "10.244.1.1", []string{"10.244.1.2"}},
		{"fd00:10:244:1::/125", "fd00:10:244:1::1",
			[]string{"fd00:10:244:1::2", "fd00:10:244:1::3", "fd00:10:244:1::4", "fd00:10:244:1::5", "fd00:10:244:1::6", "fd00:10:244:1::7"}},
		{"fd00:10:244:1::/126", "fd00:10:244:1::1", []string{"fd00:10:244:1::2", "fd00:10:244:1::3"}},
	}
	for _, tt := range tests {
		t.Run(tt.block, func(t *testing.T) {
			p := newPool(t, tt.block, PoolOptions{})
			if p.Gateway().String() != tt.wantGateway {
				t.Errorf("Gateway = %s, want %s", p.Gateway(), tt.wantGateway)
			}
			if p.Usable() != uint64(len(tt.wantAll)) {
				t.Errorf("Usable = %d, want %d", p.Usable(), len(tt.wantAll))
			}
			if got := allocateN(t, p, "pod", len(tt.wantAll)); !equalStrings(got, tt.wantAll) {
				t.Errorf("addresses = %v, want %v", got, tt.wantAll)
			}
			a, _ := p.Lookup("pod0")
			if a.Address != prefix(tt.wantAll[0]+"/"+itoa(p.Block().Bits())) || a.Gateway.String() != tt.wantGateway {
				t.Errorf("Lookup(pod0) = %+v", a)
			}
			if _, err := p.Allocate("one-too-many"); !errors.Is(err, ErrExhausted) {
				t.Errorf("Allocate past the end: %v, want ErrExhausted", err)
			}
		})
	}
}

func TestNewAddressPoolInvalid(t *testing.T) {
	tests := []struct{ block, want string }{
		{"10.244.1.0/31", "leaves no pod address: use /30 or shorter"},
		{"fd00::/127", "leaves no pod address: use /126 or shorter"},
		{"fd00::/56", "more than 64 host bits: use /64 or longer"},
		{"10.244.1.7/24", "host bits set: use 10.244.1.0/24"},
		{"::ffff:10.244.1.0/120", "IPv4-mapped"},
	}
	for _, tt := range tests {
		_, err := NewAddressPool(prefix(tt.block), PoolOptions{})
		wantErrContains(t, err, tt.want)
	}
	_, err := NewAddressPool(prefix("10.244.1.0/24"), PoolOptions{Quarantine: -time.Second})
	wantErrContains(t, err, "negative quarantine")
}

func TestAddressPoolExhaustionMessage(t *testing.T) {
	p := newPool(t, "10.244.1.0/29", PoolOptions{})
	allocateN(t, p, "pod", 5)
	_, err := p.Allocate("late")
	var exhausted *AddressExhaustedError
	if !errors.As(err, &exhausted) {
		t.Fatalf("Allocate: %v, want *AddressExhaustedError", err)
	}
	if exhausted.Block != prefix("10.244.1.0/29") || exhausted.InUse != 5 || exhausted.Quarantined != 0 {
		t.Errorf("exhaustion = %+v", exhausted)
	}
	wantErrContains(t, err, "node block 10.244.1.0/29 has no free pod address", "all 5 usable addresses are in use")
}

func TestAddressPoolIdempotency(t *testing.T) {
	p := newPool(t, "10.244.1.0/24", PoolOptions{})
	first := allocateIP(t, p, "ns/a")
	if again := allocateIP(t, p, "ns/a"); again != first {
		t.Errorf("second Allocate(ns/a) = %s, want %s", again, first)
	}
	if p.InUse() != 1 {
		t.Errorf("InUse = %d, want 1", p.InUse())
	}
	if ip, ok := p.Release("ns/a"); !ok || ip != first {
		t.Errorf("Release(ns/a) = %s, %v; want %s, true", ip, ok, first)
	}
	if _, ok := p.Release("ns/a"); ok {
		t.Error("second Release(ns/a) reported an address")
	}
	if _, ok := p.Lookup("ns/a"); ok {
		t.Error("Lookup after Release found an address")
	}
}

// TestAddressPoolBackOfTheLine: freed addresses come back in the order they
// were freed, and only once the never-used addresses are gone.
func TestAddressPoolBackOfTheLine(t *testing.T) {
	tests := []struct {
		name      string
		block     string
		first     int   // pods allocated at the start
		freeOrder []int // pods released, in this order
		want      []string
	}{
		{
			name: "IPv4, every address allocated", block: "10.244.1.0/29", first: 5, freeOrder: []int{2, 0, 4},
			want: []string{"10.244.1.4", "10.244.1.2", "10.244.1.6"},
		},
		{
			name: "IPv4, never-used first", block: "10.244.1.0/29", first: 3, freeOrder: []int{1, 0},
			want: []string{"10.244.1.5", "10.244.1.6", "10.244.1.3", "10.244.1.2"},
		},
		{
			name: "IPv6, never-used first", block: "fd00::/125", first: 4, freeOrder: []int{3, 0, 2},
			want: []string{"fd00::6", "fd00::7", "fd00::5", "fd00::2", "fd00::4"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := newPool(t, tt.block, PoolOptions{})
			allocateN(t, p, "old", tt.first)
			for _, i := range tt.freeOrder {
				p.Release("old" + itoa(i))
			}
			if got := allocateN(t, p, "new", len(tt.want)); !equalStrings(got, tt.want) {
				t.Errorf("addresses = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestAddressPoolQuarantine(t *testing.T) {
	clock := newFakeClock()
	start := clock.Now()
	p := newPool(t, "10.244.1.0/29", PoolOptions{Quarantine: time.Minute, Now: clock.Now})
	allocateN(t, p, "pod", 5) // .2 .. .6
	p.Release("pod1")         // .3 at start
	clock.Advance(10 * time.Second)
	p.Release("pod3") // .5 at start+10s

	steps := []struct {
		at      time.Duration // since start
		want    string        // address handed out, or "" for exhaustion
		readyAt time.Duration // with exhaustion: when the next address frees up
		waiting uint64
	}{
		{at: 30 * time.Second, readyAt: time.Minute, waiting: 2},
		{at: 59 * time.Second, readyAt: time.Minute, waiting: 2},
		{at: time.Minute, want: "10.244.1.3"},
		{at: time.Minute, readyAt: 70 * time.Second, waiting: 1},
		{at: 70 * time.Second, want: "10.244.1.5"},
		{at: time.Hour, readyAt: 0, waiting: 0},
	}
	for i, s := range steps {
		clock.t = start.Add(s.at)
		a, err := p.Allocate("new" + itoa(i))
		if s.want != "" {
			if err != nil || a.Address.Addr().String() != s.want {
				t.Errorf("at +%v: Allocate = %v, %v; want %s", s.at, a.Address, err, s.want)
			}
			continue
		}
		var exhausted *AddressExhaustedError
		if !errors.As(err, &exhausted) {
			t.Fatalf("at +%v: Allocate = %v, %v; want exhaustion", s.at, a.Address, err)
		}
		wantReady := time.Time{}
		if s.readyAt != 0 {
			wantReady = start.Add(s.readyAt)
		}
		if exhausted.Quarantined != s.waiting || !exhausted.ReadyAt.Equal(wantReady) {
			t.Errorf("at +%v: quarantined %d until %v, want %d until %v", s.at, exhausted.Quarantined, exhausted.ReadyAt, s.waiting, wantReady)
		}
		if s.waiting > 0 {
			wantErrContains(t, err, "10.244.1.0/29", "in quarantine", wantReady.Format(time.RFC3339))
		}
	}
}

func TestAddressPoolRestoreConflicts(t *testing.T) {
	tests := []struct {
		name       string
		pod        string
		ip         string
		wantReason ConflictReason
		wantMsg    string
	}{
		{"same pod again", "ns/a", "10.244.1.5", 0, ""},
		{"taken by another pod", "ns/b", "10.244.1.5", ConflictTaken, `pod address 10.244.1.5 claimed by "ns/b": already allocated to pod "ns/a"`},
		{"pod already has an address", "ns/a", "10.244.1.6", ConflictAlreadyAssigned, "already holds 10.244.1.5 in node block 10.244.1.0/24"},
		{"outside the block", "ns/b", "10.244.2.5", ConflictOutside, "outside node block 10.244.1.0/24"},
		{"other family", "ns/b", "fd00::5", ConflictOutside, "outside node block"},
		{"network address", "ns/b", "10.244.1.0", ConflictReserved, "reserved as the network address of node block 10.244.1.0/24"},
		{"gateway", "ns/b", "10.244.1.1", ConflictReserved, "reserved as the gateway"},
		{"broadcast", "ns/b", "10.244.1.255", ConflictReserved, "reserved as the broadcast address"},
		{"last usable", "ns/b", "10.244.1.254", 0, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := newPool(t, "10.244.1.0/24", PoolOptions{})
			if err := p.Restore("ns/a", addr("10.244.1.5")); err != nil {
				t.Fatal(err)
			}
			err := p.Restore(tt.pod, addr(tt.ip))
			if tt.wantReason == 0 {
				if err != nil {
					t.Fatalf("Restore: %v", err)
				}
				return
			}
			var conflict *ConflictError
			if !errors.As(err, &conflict) || conflict.Reason != tt.wantReason {
				t.Fatalf("Restore = %v, want a *ConflictError with reason %v", err, tt.wantReason)
			}
			wantErrContains(t, err, tt.wantMsg)
		})
	}
}

// TestAddressPoolRestoreOrder pins the documented order after a restart:
// above the highest restored address first, then the addresses below it
// (unknown history) ascending, then those freed since the restart.
func TestAddressPoolRestoreOrder(t *testing.T) {
	restored := map[string]string{"ns/a": "10.244.1.2", "ns/b": "10.244.1.9", "ns/c": "10.244.1.5"}
	want := []string{
		"10.244.1.10", "10.244.1.11", "10.244.1.12", "10.244.1.13", "10.244.1.14", // never used
		"10.244.1.3", "10.244.1.4", "10.244.1.6", "10.244.1.7", "10.244.1.8", // below the highest
		"10.244.1.5", // freed after the restart
	}
	for _, order := range [][]string{{"ns/a", "ns/b", "ns/c"}, {"ns/c", "ns/b", "ns/a"}, {"ns/b", "ns/a", "ns/c"}} {
		p := newPool(t, "10.244.1.0/28", PoolOptions{})
		for _, pod := range order {
			if err := p.Restore(pod, addr(restored[pod])); err != nil {
				t.Fatal(err)
			}
		}
		p.Release("ns/c")
		if got := allocateN(t, p, "new", len(want)); !equalStrings(got, want) {
			t.Errorf("restore order %v: addresses = %v, want %v", order, got, want)
		}
	}
}

func TestAddressPoolRestoreQuarantinesUnknownAddresses(t *testing.T) {
	clock := newFakeClock()
	p := newPool(t, "10.244.1.0/29", PoolOptions{Quarantine: time.Minute, Now: clock.Now})
	if err := p.Restore("ns/a", addr("10.244.1.4")); err != nil {
		t.Fatal(err)
	}
	// .5 and .6 were never used; .2 and .3 may have been freed just before the restart.
	if got := allocateN(t, p, "new", 2); !equalStrings(got, []string{"10.244.1.5", "10.244.1.6"}) {
		t.Fatalf("addresses = %v", got)
	}
	_, err := p.Allocate("early")
	wantErrContains(t, err, "2 are in quarantine")
	clock.Advance(time.Minute)
	if got := allocateN(t, p, "late", 2); !equalStrings(got, []string{"10.244.1.2", "10.244.1.3"}) {
		t.Errorf("after the quarantine: %v", got)
	}
}

func TestAddressPoolHighWater(t *testing.T) {
	p := newPool(t, "10.244.1.0/24", PoolOptions{})
	allocateN(t, p, "pod", 8) // .2 .. .9
	for i := 1; i < 8; i++ {
		p.Release("pod" + itoa(i))
	}
	hw, ok := p.HighWater()
	if !ok || hw != addr("10.244.1.9") {
		t.Fatalf("HighWater = %s, %v", hw, ok)
	}
	// After a restart only pod0 (.2) is left; without the high water, .3 would come next.
	q := newPool(t, "10.244.1.0/24", PoolOptions{})
	if err := q.Restore("pod0", addr("10.244.1.2")); err != nil {
		t.Fatal(err)
	}
	if err := q.RestoreHighWater(hw); err != nil {
		t.Fatal(err)
	}
	if got := allocateIP(t, q, "new"); got != addr("10.244.1.10") {
		t.Errorf("after RestoreHighWater(%s): %s, want 10.244.1.10", hw, got)
	}
	wantErrContains(t, q.RestoreHighWater(addr("10.244.1.255")), "not a usable address of node block 10.244.1.0/24")
}

// TestAddressPoolHighWaterAhead: the record ahead of use covers the next addresses the
// never-used cursor hands out, before the first one too, and stops at the block's last
// usable address.
func TestAddressPoolHighWaterAhead(t *testing.T) {
	p := newPool(t, "10.244.1.0/24", PoolOptions{})
	if got := p.HighWaterAhead(16); got != addr("10.244.1.17") {
		t.Errorf("before any address: %s, want 10.244.1.17 (.2 to .17 are the first 16)", got)
	}
	allocateN(t, p, "pod", 3) // .2 .. .4
	if got := p.HighWaterAhead(16); got != addr("10.244.1.20") {
		t.Errorf("after .4: %s, want 10.244.1.20", got)
	}
	if got := p.HighWaterAhead(1); got != addr("10.244.1.5") {
		t.Errorf("one ahead after .4: %s, want the next address 10.244.1.5", got)
	}
	allocateN(t, p, "more", 245) // up to .249
	if got := p.HighWaterAhead(16); got != addr("10.244.1.254") {
		t.Errorf("near the end: %s, want the last usable address 10.244.1.254", got)
	}
	allocateN(t, p, "last", 5) // .250 .. .254: nothing never-used is left
	if got := p.HighWaterAhead(16); got != addr("10.244.1.254") {
		t.Errorf("all handed out: %s, want 10.244.1.254", got)
	}
}

// TestAddressPoolIPv6Cursor: a /64 pool is a cursor, and churn does not grow
// its memory, because freed addresses of a huge range are not queued.
func TestAddressPoolIPv6Cursor(t *testing.T) {
	p := newPool(t, "fd00:10:244:1::/64", PoolOptions{Quarantine: time.Minute})
	if p.Usable() != 1<<64-2 {
		t.Errorf("Usable = %d, want 2^64-2", p.Usable())
	}
	if got := allocateN(t, p, "first", 3); !equalStrings(got, []string{"fd00:10:244:1::2", "fd00:10:244:1::3", "fd00:10:244:1::4"}) {
		t.Errorf("addresses = %v", got)
	}
	if err := p.Restore("far", addr("fd00:10:244:1:ffff:ffff:ffff:fffe")); err != nil {
		t.Fatal(err)
	}
	if got := allocateIP(t, p, "last"); got != addr("fd00:10:244:1:ffff:ffff:ffff:ffff") {
		t.Errorf("after the far restore: %s", got)
	}

	p = newPool(t, "fd00:10:244:1::/64", PoolOptions{})
	const live, rounds = 16, 200_000
	keys := make([]string, live)
	for i := range keys {
		keys[i] = "pod" + itoa(i)
		allocateIP(t, p, keys[i])
	}
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	for r := range rounds {
		k := keys[r%live]
		p.Release(k)
		if _, err := p.Allocate(k); err != nil {
			t.Fatal(err)
		}
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	if q := len(p.addresses.fifo) + len(p.addresses.queued); q != 0 {
		t.Errorf("%d freed addresses queued in a /64, want 0", q)
	}
	if p.InUse() != live {
		t.Errorf("InUse = %d, want %d", p.InUse(), live)
	}
	if grown := int64(after.HeapAlloc) - int64(before.HeapAlloc); grown > 1<<20 {
		t.Errorf("heap grew by %d bytes over %d alloc/release rounds", grown, rounds)
	}
	want := addr("fd00:10:244:1::2")
	for range live + rounds - 1 {
		want = want.Next()
	}
	if hw, _ := p.HighWater(); hw != want {
		t.Errorf("HighWater = %s, want %s", hw, want)
	}
}

// TestAddressPoolSpilledOrder exercises the huge-range mode on a small block:
// addresses freed while many never-used remain come back ascending, after the
// never-used ones, and before those freed near the end.
func TestAddressPoolSpilledOrder(t *testing.T) {
	p := newPool(t, "10.244.1.0/28", PoolOptions{}) // .2 .. .14
	p.addresses.spillAbove = 6
	allocateN(t, p, "old", 4) // .2 .. .5, 9 never-used remain
	p.Release("old2")         // .4: spilled
	p.Release("old0")         // .2: spilled
	allocateN(t, p, "mid", 5) // .6 .. .10, 4 never-used remain
	p.Release("mid4")         // .10: queued
	p.Release("mid0")         // .6: queued
	got := allocateN(t, p, "new", 8)
	want := []string{"10.244.1.11", "10.244.1.12", "10.244.1.13", "10.244.1.14", "10.244.1.2", "10.244.1.4", "10.244.1.10", "10.244.1.6"}
	if !equalStrings(got, want) {
		t.Errorf("addresses = %v, want %v", got, want)
	}
}
