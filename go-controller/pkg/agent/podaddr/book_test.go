package podaddr

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/kovs-net/kovs/go-controller/pkg/controller/ipam"
)

var blocks = []netip.Prefix{netip.MustParsePrefix("10.244.1.0/28"), netip.MustParsePrefix("fd00:10:244:1::/64")}

// disk is the durable state a node keeps: the pod ports (uid -> addresses) and the
// recorded high water. It survives a crash of the agent; the Book does not.
type disk struct {
	ports map[string][]netip.Addr
	hw    ipam.HighWater
	// failHighWater makes the next high-water write fail (a crash while writing).
	failHighWater bool
}

func (d *disk) RecordHighWater(_ context.Context, hw ipam.HighWater) error {
	if d.failHighWater {
		d.failHighWater = false
		return errors.New("crashed while writing")
	}
	d.hw = hw
	return nil
}

func (d *disk) records() []Record {
	var out []Record
	for uid, ips := range d.ports {
		out = append(out, Record{Port: "port-" + uid, UID: uid, IPs: ips})
	}
	return out
}

func open(t *testing.T, d *disk, now func() time.Time) *Book {
	t.Helper()
	b, err := New("node-1", blocks, ipam.PoolOptions{Quarantine: time.Minute, Now: now}, d, "--block-size")
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Restore(d.records(), d.hw); err != nil {
		t.Fatal(err)
	}
	return b
}

func ipsOf(addrs []ipam.PodAddress) []netip.Addr {
	out := make([]netip.Addr, 0, len(addrs))
	for _, a := range addrs {
		out = append(out, a.Address.Addr())
	}
	return out
}

// TestCrashAtAnyPointNeverHandsOutTwice drives random pod starts and stops through the
// agent's order (Allocate, then the port; the port's removal, then Release) and crashes
// the agent at random points: between Allocate and the port, between the port's removal
// and Release, while a high water is written. After each crash a new Book opens from
// what is durable. No address is ever held by two live pods, and an address freed (a
// port removed) is not handed out again within the quarantine, across restarts too.
func TestCrashAtAnyPointNeverHandsOutTwice(t *testing.T) {
	for seed := uint64(1); seed <= 200; seed++ {
		t.Run(fmt.Sprint(seed), func(t *testing.T) { crashRun(t, seed) })
	}
}

func crashRun(t *testing.T, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, 26))
	now := time.Unix(1_000_000, 0)
	clock := func() time.Time { return now }
	d := &disk{ports: map[string][]netip.Addr{}}
	b := open(t, d, clock)
	freedAt := map[netip.Addr]time.Time{} // addresses whose port was removed, and when
	next := 0
	for step := 0; step < 120; step++ {
		now = now.Add(time.Duration(rng.IntN(20)) * time.Second)
		switch op := rng.IntN(10); {
		case op < 5: // a pod starts
			uid := fmt.Sprintf("pod-%d", next)
			next++
			d.failHighWater = rng.IntN(15) == 0
			addrs, err := b.Allocate(context.Background(), uid)
			if errors.Is(err, ipam.ErrExhausted) {
				continue
			}
			if err != nil { // the high-water write failed: the agent crashed there
				b = open(t, d, clock)
				continue
			}
			if rng.IntN(8) == 0 { // crash between Allocate and the port
				b = open(t, d, clock)
				continue
			}
			ips := ipsOf(addrs)
			for _, ip := range ips {
				for holder, held := range d.ports {
					for _, h := range held {
						if h == ip {
							t.Fatalf("step %d: %s handed out to %s while %s holds it", step, ip, uid, holder)
						}
					}
				}
				if at, ok := freedAt[ip]; ok && now.Sub(at) < time.Minute {
					t.Fatalf("step %d: %s handed out %s after it was freed, within the quarantine", step, ip, now.Sub(at))
				}
			}
			d.ports[uid] = ips
		case op < 9 && len(d.ports) > 0: // a pod stops
			var uid string
			for u := range d.ports {
				if uid == "" || u < uid {
					uid = u
				}
			}
			for _, ip := range d.ports[uid] {
				freedAt[ip] = now
			}
			delete(d.ports, uid)
			if rng.IntN(6) == 0 { // crash between the port's removal and Release
				b = open(t, d, clock)
				continue
			}
			b.Release(uid)
		default: // a clean restart
			b = open(t, d, clock)
		}
	}
}

// TestRestoreRefusesWhatItCannotTake: a record without a UID, an address outside the
// node's blocks (another node's database) and one address recorded for two pods stop the
// restore with an error that names the record.
func TestRestoreRefusesWhatItCannotTake(t *testing.T) {
	a := netip.MustParseAddr("10.244.1.5")
	cases := []struct {
		name    string
		records []Record
		want    string
	}{
		{"no UID", []Record{{Port: "kv1", IPs: []netip.Addr{a}}}, "port kv1"},
		{"another node's block", []Record{{Port: "kv1", UID: "u1", IPs: []netip.Addr{netip.MustParseAddr("10.244.2.5")}}}, "outside node block"},
		{"one address, two pods", []Record{{Port: "kv1", UID: "u1", IPs: []netip.Addr{a}}, {Port: "kv2", UID: "u2", IPs: []netip.Addr{a}}}, "kv2"},
		{"one pod, two addresses", []Record{{Port: "kv1", UID: "u1", IPs: []netip.Addr{a}}, {Port: "kv2", UID: "u1", IPs: []netip.Addr{a.Next()}}}, "kv2"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			b, err := New("node-1", blocks, ipam.PoolOptions{}, &disk{}, "--block-size")
			if err != nil {
				t.Fatal(err)
			}
			err = b.Restore(tc.records, nil)
			var corrupt *CorruptError
			if !errors.As(err, &corrupt) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Restore = %v, want a CorruptError saying %q", err, tc.want)
			}
		})
	}
}

// TestReplacedSandboxesAgree: two records of one pod (a sandbox replaced without a DEL)
// with the same addresses restore as one allocation.
func TestReplacedSandboxesAgree(t *testing.T) {
	a := []netip.Addr{netip.MustParseAddr("10.244.1.5"), netip.MustParseAddr("fd00:10:244:1::5")}
	b, err := New("node-1", blocks, ipam.PoolOptions{}, &disk{}, "--block-size")
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Restore([]Record{{Port: "kv1", UID: "u1", IPs: a}, {Port: "kv2", UID: "u1", IPs: a}}, nil); err != nil {
		t.Fatal(err)
	}
	addrs, err := b.Allocate(context.Background(), "u1")
	if err != nil || len(addrs) != 2 || addrs[0].Address.Addr() != a[0] {
		t.Fatalf("Allocate of the restored pod = %v, %v; want its addresses %v", addrs, err, a)
	}
}

// TestFullBlockSaysWhatToChange: exhaustion names the node, the block and the flag.
func TestFullBlockSaysWhatToChange(t *testing.T) {
	b, err := New("node-1", blocks, ipam.PoolOptions{}, &disk{}, "--block-size")
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 13; i++ { // a /28 has 13 pod addresses
		if _, err := b.Allocate(context.Background(), fmt.Sprint("u", i)); err != nil {
			t.Fatalf("allocation %d: %v", i, err)
		}
	}
	_, err = b.Allocate(context.Background(), "one-too-many")
	for _, want := range []string{"node-1", "10.244.1.0/28", "--block-size"} {
		if !errors.Is(err, ipam.ErrExhausted) || !strings.Contains(err.Error(), want) {
			t.Errorf("Allocate into a full block = %v, want ErrExhausted saying %q", err, want)
		}
	}
	if len(b.Lookup("one-too-many")) != 0 {
		t.Error("a refused allocation left an address (of the other family) behind")
	}
}
