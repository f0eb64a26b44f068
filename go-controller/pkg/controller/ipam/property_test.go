package ipam

import (
	"math/rand/v2"
	"net/netip"
	"slices"
	"sync"
	"testing"
	"time"
)

// poolModel is the allocation order spelled out naively over a small block:
// the never-used addresses as a list, spilled addresses as a sorted set, and
// freed addresses as a FIFO with their quarantine end.
type poolModel struct {
	neverUsed   []netip.Addr
	gaps        []netip.Addr // spilled, kept sorted
	gapsReadyAt time.Time
	fifo        []modelFreed
	live        map[string]netip.Addr
	quarantine  time.Duration
	spillAbove  int
}

type modelFreed struct {
	ip      netip.Addr
	readyAt time.Time
}

func newPoolModel(p *AddressPool, quarantine time.Duration, spillAbove int) *poolModel {
	m := &poolModel{live: map[string]netip.Addr{}, quarantine: quarantine, spillAbove: spillAbove}
	for ip := p.Gateway().Next(); p.Block().Contains(ip); ip = ip.Next() {
		m.neverUsed = append(m.neverUsed, ip)
	}
	if p.Family() == IPv4 {
		m.neverUsed = m.neverUsed[:len(m.neverUsed)-1] // broadcast
	}
	return m
}

func (m *poolModel) allocate(key string, now time.Time) (netip.Addr, bool) {
	if ip, ok := m.live[key]; ok {
		return ip, true
	}
	var ip netip.Addr
	switch {
	case len(m.neverUsed) > 0:
		ip, m.neverUsed = m.neverUsed[0], m.neverUsed[1:]
	case len(m.gaps) > 0 && !now.Before(m.gapsReadyAt):
		ip, m.gaps = m.gaps[0], m.gaps[1:]
	case len(m.fifo) > 0 && !now.Before(m.fifo[0].readyAt):
		ip, m.fifo = m.fifo[0].ip, m.fifo[1:]
	default:
		return netip.Addr{}, false
	}
	m.live[key] = ip
	return ip, true
}

func (m *poolModel) release(key string, now time.Time) {
	ip := m.live[key]
	delete(m.live, key)
	if len(m.neverUsed) > m.spillAbove {
		m.gaps = append(m.gaps, ip)
		slices.SortFunc(m.gaps, netip.Addr.Compare)
		if r := now.Add(m.quarantine); r.After(m.gapsReadyAt) {
			m.gapsReadyAt = r
		}
		return
	}
	m.fifo = append(m.fifo, modelFreed{ip: ip, readyAt: now.Add(m.quarantine)})
}

// TestAddressPoolMatchesModel drives pools and the model with the same random
// operations and requires the same answers, and that no two live pods ever
// share an address.
func TestAddressPoolMatchesModel(t *testing.T) {
	tests := []struct {
		block      string
		quarantine time.Duration
		spillAbove int
	}{
		{"10.244.1.0/28", 0, defaultSpillAbove},
		{"10.244.1.0/28", 20 * time.Second, defaultSpillAbove},
		{"10.244.1.0/26", 5 * time.Second, 20},
		{"fd00:10:244:1::/124", 0, defaultSpillAbove},
		{"fd00:10:244:1::/122", 10 * time.Second, 16},
	}
	const rounds = 20_000
	for _, tt := range tests {
		for seed := uint64(1); seed <= 3; seed++ {
			clock := newFakeClock()
			p := newPool(t, tt.block, PoolOptions{Quarantine: tt.quarantine, Now: clock.Now})
			p.addresses.spillAbove = uint64(tt.spillAbove)
			m := newPoolModel(p, tt.quarantine, tt.spillAbove)
			rng := rand.New(rand.NewPCG(seed, 0x6b6f7673))
			owner := map[netip.Addr]string{}
			var live []string
			nextKey := 0
			for r := range rounds {
				clock.Advance(time.Duration(rng.IntN(3000)) * time.Millisecond)
				now := clock.Now()
				var key string
				switch op := rng.IntN(10); {
				case op < 6 || len(live) == 0: // a new pod
					key = "pod" + itoa(nextKey)
					nextKey++
				case op < 7: // an existing pod again
					key = live[rng.IntN(len(live))]
				default: // a pod goes away
					i := rng.IntN(len(live))
					key = live[i]
					live = slices.Delete(live, i, i+1)
					got, _ := p.Release(key)
					delete(owner, got)
					m.release(key, now)
					continue
				}
				a, err := p.Allocate(key)
				want, ok := m.allocate(key, now)
				if (err == nil) != ok || (ok && a.Address.Addr() != want) {
					t.Fatalf("%s seed %d round %d: Allocate(%s) = %v, %v; model %v, %v", tt.block, seed, r, key, a.Address, err, want, ok)
				}
				if err != nil {
					continue
				}
				ip := a.Address.Addr()
				if holder, taken := owner[ip]; taken && holder != key {
					t.Fatalf("%s seed %d round %d: %s handed to %s while %s holds it", tt.block, seed, r, ip, key, holder)
				}
				if !slices.Contains(live, key) {
					live = append(live, key)
				}
				owner[ip] = key
			}
			if p.InUse() != uint64(len(live)) {
				t.Errorf("%s seed %d: InUse = %d, want %d", tt.block, seed, p.InUse(), len(live))
			}
		}
	}
}

// TestPodAddressPoolsConcurrent hammers one node's dual-stack pools from
// several workers; each address must be held by at most one pod at a time.
func TestPodAddressPoolsConcurrent(t *testing.T) {
	p := newPodAddressPools(t, "10.244.1.0/26", "fd00:10:244:1::/64")
	var mu sync.Mutex
	holder := map[netip.Addr]string{}
	claim := func(key string, addrs []PodAddress) {
		mu.Lock()
		defer mu.Unlock()
		for _, a := range addrs {
			if h, ok := holder[a.Address.Addr()]; ok && h != key {
				t.Errorf("%s handed to %s while %s holds it", a.Address, key, h)
			}
			holder[a.Address.Addr()] = key
		}
	}
	// release unclaims before releasing: once released, an address may be
	// handed to another worker's pod at once.
	release := func(key string) {
		held := p.Lookup(key)
		mu.Lock()
		for _, a := range held {
			delete(holder, a.Address.Addr())
		}
		mu.Unlock()
		if got := p.Release(key); len(got) != len(held) {
			t.Errorf("Release(%s) = %v, held %v", key, got, held)
		}
	}
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(w), 1))
			var mine []string
			for i := range 3000 {
				if len(mine) > 0 && rng.IntN(2) == 0 {
					k := mine[0]
					mine = mine[1:]
					release(k)
					continue
				}
				key := "w" + itoa(w) + "/pod" + itoa(i)
				addrs, err := p.Allocate(key)
				if err != nil {
					continue // the /26 may be full for a moment
				}
				claim(key, addrs)
				mine = append(mine, key)
			}
		})
	}
	wg.Wait()
}
