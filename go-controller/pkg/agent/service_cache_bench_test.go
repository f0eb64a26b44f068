package agent

import (
	"fmt"
	"net/netip"
	"testing"

	"github.com/kovs-net/kovs/go-controller/pkg/pipeline"
)

// BenchmarkOneServiceChange: the desired flows after one endpoint of one Service changed,
// among 1,000 Services of 10 endpoints: everything compiled and rendered (Flows, the
// baseline) against Desired, whose compiler keeps the 999 unchanged Services.
func BenchmarkOneServiceChange(b *testing.B) {
	port := func(i, variant int) []pipeline.ServicePort {
		var eps []netip.AddrPort
		for j := range 10 {
			eps = append(eps, netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, 244, byte(j), byte(i%250 + variant)}), 8080))
		}
		g := pipeline.ServiceGroup{ID: pipeline.ServiceGroupBase | uint32(i+1), Endpoints: eps}
		return []pipeline.ServicePort{{Name: fmt.Sprintf("ns/s%d:http/TCP", i), IPProto: 6, Port: 80,
			ClusterIP: netip.AddrFrom4([4]byte{10, 96, byte(i / 250), byte(i%250 + 1)}), Internal: g, External: g}}
	}
	newState := func() *NodeState {
		s := NewNodeState(1, nil)
		s.SetNode(testNodeConfig())
		all := map[string][]pipeline.ServicePort{}
		for i := range 1000 {
			all[fmt.Sprint("ns/s", i)] = port(i, 0)
		}
		s.SetServices(all)
		return s
	}
	b.Run("compile-and-render-all", func(b *testing.B) {
		s := newState()
		for i := 0; b.Loop(); i++ {
			s.SetService("ns/s7", port(7, i%2))
			c, _, err := s.Compiled()
			if err != nil {
				b.Fatal(err)
			}
			_ = pipeline.Desire(c.Flows, c.Groups)
		}
	})
	b.Run("rendered-flows-cached", func(b *testing.B) {
		s := newState()
		if _, _, err := s.Desired(); err != nil {
			b.Fatal(err)
		}
		for i := 0; b.Loop(); i++ {
			s.SetService("ns/s7", port(7, i%2))
			if _, _, err := s.Desired(); err != nil {
				b.Fatal(err)
			}
		}
	})
}
