package ipam

import (
	"net/netip"
	"testing"
	"time"
)

// BenchmarkAllocateRelease measures one pod churn step: release the oldest of
// a set of live pods and allocate a new one.
func BenchmarkAllocateRelease(b *testing.B) {
	cases := []struct {
		name       string
		block      string
		live       int
		quarantine time.Duration
	}{
		{"IPv4-24", "10.244.1.0/24", 200, 0},
		{"IPv4-24-quarantine", "10.244.1.0/24", 200, time.Nanosecond},
		{"IPv4-16", "10.244.0.0/16", 20_000, 0},
		{"IPv6-64", "fd00:10:244:1::/64", 200, 0},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			p := newPool(b, c.block, PoolOptions{Quarantine: c.quarantine})
			keys := make([]string, c.live+1<<12)
			for i := range keys {
				keys[i] = "ns/pod-" + itoa(i)
			}
			for i := range c.live {
				if _, err := p.Allocate(keys[i]); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; b.Loop(); i++ {
				p.Release(keys[i%len(keys)])
				if _, err := p.Allocate(keys[(i+c.live)%len(keys)]); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
	b.Run("dual-stack", func(b *testing.B) {
		p, err := NewPodAddressPools([]netip.Prefix{prefix("10.244.1.0/24"), prefix("fd00:10:244:1::/64")}, PoolOptions{})
		if err != nil {
			b.Fatal(err)
		}
		keys := make([]string, 200+1<<12)
		for i := range keys {
			keys[i] = "ns/pod-" + itoa(i)
		}
		for i := range 200 {
			if _, err := p.Allocate(keys[i]); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportAllocs()
		for i := 0; b.Loop(); i++ {
			p.Release(keys[i%len(keys)])
			if _, err := p.Allocate(keys[(i+200)%len(keys)]); err != nil {
				b.Fatal(err)
			}
		}
	})
}
