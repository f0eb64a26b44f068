package integration

import (
	"context"
	"fmt"
	"testing"

	"github.com/kovs-net/kovs/go-controller/pkg/ovs"
	"github.com/kovs-net/kovs/go-controller/pkg/ovs/ovstest"
)

// BenchmarkBundle measures applying n flows as one bundle on the userspace
// datapath; each iteration is a new round that replaces every flow.
func BenchmarkBundle(b *testing.B) {
	for _, n := range []int{1000, 10000} {
		b.Run(fmt.Sprintf("flows=%d", n), func(b *testing.B) {
			rig := ovstest.Start(b)
			ctx := context.Background()
			db, err := ovs.NewOVSDB(ctx, rig.Endpoint())
			if err != nil {
				b.Fatal(err)
			}
			defer db.Close()
			if err := db.EnsureBridge(ctx, brIntSpec()); err != nil {
				b.Fatal(err)
			}
			of, err := ovs.NewOpenFlow(ovs.OpenFlowConfig{Bridge: "br-int", RunDir: rig.Dir})
			if err != nil {
				b.Fatal(err)
			}
			rounds := make([][]ovs.Mod, b.N)
			for i := range rounds {
				rounds[i] = roundFlows(uint16(i+1), n)
			}
			b.ResetTimer()
			for i := range b.N {
				if err := of.Bundle(ctx, rounds[i]); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
