package ipam

import (
	"testing"
	"time"
)

// TestIndexPoolRestoreOfQueuedIndex: an index restored while queued leaves a
// stale FIFO entry; once released again it must wait at the back of the line
// for its new quarantine, not come back through the stale entry.
func TestIndexPoolRestoreOfQueuedIndex(t *testing.T) {
	t0 := time.Date(2026, 1, 2, 15, 0, 0, 0, time.UTC)
	p := newIndexPool(0, 4, time.Minute)
	for _, o := range []string{"a", "b", "c", "d"} {
		p.take(o, t0)
	}
	p.release("b", t0)                  // index 1, ready at t0+1m
	p.release("d", t0.Add(time.Second)) // index 3, ready at t0+1m1s
	if c := p.restore("x", 1, t0.Add(2*time.Second)); c != nil {
		t.Fatalf("restore of a queued index: %+v", c)
	}
	p.release("x", t0.Add(3*time.Second)) // index 1 again, ready at t0+1m3s

	steps := []struct {
		at   time.Duration
		want int // -1: nothing free
	}{
		{time.Minute, -1}, // the stale entry for index 1 must not count
		{time.Minute + time.Second, 3},
		{time.Minute + 2*time.Second, -1},
		{time.Minute + 3*time.Second, 1},
	}
	for i, s := range steps {
		got, _, ok := p.take("new"+itoa(i), t0.Add(s.at))
		if (s.want < 0) == ok || (ok && got != uint64(s.want)) {
			t.Errorf("at +%v: take = %d, %v; want %d", s.at, got, ok, s.want)
		}
	}
}

// TestIndexPoolLongFIFO: a FIFO longer than the compaction threshold keeps
// release order through compactions.
func TestIndexPoolLongFIFO(t *testing.T) {
	const n = 5000
	var now time.Time
	p := newIndexPool(10, n, 0)
	for i := range n {
		p.take(itoa(i), now)
	}
	// Release in a scrambled but known order.
	var order []uint64
	for i := range n {
		j := (i * 7919) % n
		idx, _ := p.release(itoa(j), now)
		order = append(order, idx)
	}
	for i, want := range order {
		got, _, ok := p.take("new"+itoa(i), now)
		if !ok || got != want {
			t.Fatalf("take #%d = %d, %v; want %d", i, got, ok, want)
		}
		if i == n/2 && len(p.fifo) > n/2+1024 {
			t.Errorf("FIFO not compacted: len %d, head %d", len(p.fifo), p.head)
		}
	}
	if _, _, ok := p.take("extra", now); ok {
		t.Error("take from a full pool succeeded")
	}
}

func TestUint128(t *testing.T) {
	for _, s := range []uint{0, 1, 31, 63, 64, 65, 100, 127} {
		for _, n := range []uint64{1, 0x8000_0000_0000_0001, 0xdead_beef} {
			u := shl(n, s)
			if back := u.shr(s); s < 64 && back != n || s >= 64 && back != n<<(s-64)>>(s-64) {
				t.Errorf("shl(%#x, %d).shr(%d) = %#x", n, s, s, back)
			}
		}
	}
	a := addrToUint128(addr("fd00::ffff:ffff:ffff:ffff")).add(1)
	if got := a.addr(IPv6); got != addr("fd00:0:0:1::") {
		t.Errorf("carry: %s", got)
	}
	if d := addrToUint128(addr("10.244.1.9")).sub(addrToUint128(addr("10.244.1.0"))); d != 9 {
		t.Errorf("sub = %d", d)
	}
}
